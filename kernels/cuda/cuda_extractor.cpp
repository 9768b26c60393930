// The CUDA Extractor: device memory, streams and validation around the kernels of
// extract_cuda.cu. Host C++20 (g++), CUDA runtime API only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_scope.h"

namespace saccade::kernels::cuda {
namespace {

static_assert(detail::kMaxFastCellPixels == kMaxFastCellPixels);
static_assert(detail::kMaxPatchSize == kMaxPatchSize);
static_assert(sizeof(detail::DeviceBox) == sizeof(CropBox));
static_assert(offsetof(detail::DeviceBox, image) == offsetof(CropBox, image));

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(err));
}

// A page-locked host buffer that only grows; owns its allocation (copies from it are truly
// asynchronous; from pageable memory the driver may wait for the stream).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    bytes = std::max(bytes, size_ + size_ / 2);  // geometric: regrown a few times at most
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr, size_ = 0;
    check(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    size_ = bytes;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

// A device buffer that only grows, from the extractor's allocator (or cudaMalloc); owns its
// allocation. `host_waits` (not owned): counts the waits for the device a release makes.
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceAllocator* allocator, std::int64_t* host_waits)
      : allocator_(allocator), host_waits_(host_waits) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : allocator_(o.allocator_), host_waits_(o.host_waits_), ptr_(o.ptr_), size_(o.size_) {
    o.ptr_ = nullptr;
    o.size_ = 0;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() { release(); }
  // At least `bytes`, first used by work queued on `stream`.
  void reserve(std::size_t bytes, cudaStream_t stream) {
    if (bytes <= size_) return;
    // Geometric growth: images of varying sizes regrow a slot a few times, not at every new
    // largest image (a release waits for the whole device).
    bytes = std::max(bytes, size_ + size_ / 2);
    release();
    if (allocator_ != nullptr)
      ptr_ = allocator_->allocate(bytes, stream);
    else
      check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    size_ = bytes;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void release() {
    if (ptr_ == nullptr) return;
    ++*host_waits_;  // either way the host waits for the whole device
    if (allocator_ != nullptr) {
      // The buffer may still be read by work queued on any stream: wait for it all, as
      // cudaFree does, before the allocator may hand the memory to someone else.
      cudaDeviceSynchronize();
      allocator_->release(ptr_);
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    size_ = 0;
  }

 private:
  DeviceAllocator* allocator_;  // not owned; nullptr: cudaMalloc / cudaFree
  std::int64_t* host_waits_;    // not owned
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

class CudaExtractorImpl final : public Extractor {
 public:
  CudaExtractorImpl(int device, DeviceAllocator* allocator)
      : device_(device),
        allocator_(allocator),
        table_descs_(allocator, &host_waits_),
        boxes_(allocator, &host_waits_),
        output_(allocator, &host_waits_) {
    const DeviceScope scope(device_);
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&staging_read_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&queued_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaExtractorImpl() override {
    const DeviceScope scope(device_, std::nothrow);
    if (queued_) cudaEventSynchronize(queued_done_);  // the buffers go with this object
    // Given back while the stream they were allocated on lives: a caching allocator files a
    // block under its stream, and one filed under a destroyed stream is never reused.
    tables_.clear();
    table_descs_.release();
    boxes_.release();
    output_.release();
    cudaEventDestroy(staging_read_);
    cudaEventDestroy(queued_done_);
    cudaStreamDestroy(stream_);
  }

  Backend backend() const override { return Backend::kCuda; }
  int num_images() const override { return static_cast<int>(descs_.size()); }
  int channels() const override { return channels_; }
  std::int64_t host_waits() const override { return host_waits_; }

  void set_images(std::span<const ImageView> images) override {
    validate_images(images);
    const DeviceScope scope(device_);
    wait_for_queued();
    while (tables_.size() < images.size()) tables_.emplace_back(allocator_, &host_waits_);
    descs_.clear();
    channels_ = images.empty() ? 0 : images[0].channels;
    for (std::size_t i = 0; i < images.size(); ++i) {
      Table& t = tables_[i];
      const ImageView& view = images[i];
      const int w = view.width, h = view.height, c = view.channels;
      t.image.reserve(static_cast<std::size_t>(h) * w * c, stream_);
      const std::size_t src_stride =
          view.row_stride ? view.row_stride : static_cast<std::size_t>(w) * c;
      check(cudaMemcpy2DAsync(t.image.as<void>(), static_cast<std::size_t>(w) * c, view.data,
                              src_stride, static_cast<std::size_t>(w) * c, h,
                              cudaMemcpyHostToDevice, stream_),
            "upload image");
      descs_.push_back(build(t.image.as<std::uint8_t>(), h, w, c, &t, stream_));
    }
    table_descs_.reserve(descs_.size() * sizeof(detail::DeviceTable) + 1, stream_);
    check(cudaMemcpyAsync(table_descs_.as<void>(), descs_.data(),
                          descs_.size() * sizeof(detail::DeviceTable), cudaMemcpyHostToDevice,
                          stream_),
          "copy table descriptors");
    wait_for_stream("table build");
  }

  void extract(std::span<const CropBox> boxes, int patch_size, float* out) override {
    validate_crops(boxes, num_images(), patch_size);
    wait_for_queued();
    if (boxes.empty()) return;
    if (out == nullptr) throw std::invalid_argument("out must not be null");
    // The output buffer comes from the thread's current device: make it this extractor's.
    const DeviceScope scope(device_);
    const std::size_t bytes = boxes.size() * channels_ * patch_size * patch_size * sizeof(float);
    output_.reserve(bytes, stream_);
    launch(boxes, patch_size, output_.as<float>());
    check(cudaMemcpyAsync(out, output_.as<void>(), bytes, cudaMemcpyDeviceToHost, stream_),
          "copy patches");
    wait_for_stream("extract");
  }

  void extract_to_device(std::span<const CropBox> boxes, int patch_size,
                         float* out_device) override {
    validate_crops(boxes, num_images(), patch_size);
    if (boxes.empty()) return;
    if (out_device == nullptr) throw std::invalid_argument("out_device must not be null");
    const DeviceScope scope(device_);
    wait_for_queued();
    launch(boxes, patch_size, out_device);
    wait_for_stream("extract");
  }

  void extract_queued(std::span<const ImageView> images, std::span<const CropBox> boxes,
                      int patch_size, float* out_device, void* stream_handle) override {
    validate_images(images);
    for (std::size_t i = 0; i < images.size(); ++i) {
      const ImageView& v = images[i];
      if (v.row_stride != 0 && v.row_stride != static_cast<std::ptrdiff_t>(v.width) * v.channels)
        throw std::invalid_argument("images[" + std::to_string(i) +
                                    "].row_stride must be 0 or width * channels (" +
                                    std::to_string(v.width * v.channels) + ") on the device, got " +
                                    std::to_string(v.row_stride));
    }
    validate_crops(boxes, static_cast<int>(images.size()), patch_size);
    if (!boxes.empty() && out_device == nullptr)
      throw std::invalid_argument("out_device must not be null");
    const auto stream = static_cast<cudaStream_t>(stream_handle);
    const DeviceScope scope(device_);
    // The tables and buffers are reused: work queued before on another stream must be done
    // with them first, on the device. (The synchronous calls finish before they return.)
    if (queued_ && queued_stream_ != stream)
      check(cudaStreamWaitEvent(stream, queued_done_, 0), "wait for the previous cut");
    while (tables_.size() < images.size()) tables_.emplace_back(allocator_, &host_waits_);
    descs_.clear();
    channels_ = images.empty() ? 0 : images[0].channels;
    for (std::size_t i = 0; i < images.size(); ++i)
      descs_.push_back(
          build(images[i].data, images[i].height, images[i].width, channels_, &tables_[i], stream));
    // The descriptors and boxes travel through page-locked memory, which the previous call's
    // copies may still be reading: they were queued a batch ago, so this rarely waits.
    const std::size_t desc_bytes = descs_.size() * sizeof(detail::DeviceTable);
    const std::size_t desc_at = (boxes.size_bytes() + 63) / 64 * 64;
    if (queued_) wait_for_event(staging_read_, "previous upload");
    staging_.reserve(desc_at + desc_bytes + 1);
    if (!boxes.empty()) std::memcpy(staging_.as<char>(), boxes.data(), boxes.size_bytes());
    if (desc_bytes > 0) std::memcpy(staging_.as<char>() + desc_at, descs_.data(), desc_bytes);
    table_descs_.reserve(desc_bytes + 1, stream);
    boxes_.reserve(boxes.size_bytes() + 1, stream);
    check(cudaMemcpyAsync(table_descs_.as<void>(), staging_.as<char>() + desc_at, desc_bytes,
                          cudaMemcpyHostToDevice, stream),
          "copy table descriptors");
    check(cudaMemcpyAsync(boxes_.as<void>(), staging_.as<char>(), boxes.size_bytes(),
                          cudaMemcpyHostToDevice, stream),
          "upload boxes");
    check(cudaEventRecord(staging_read_, stream), "record the upload");
    if (!boxes.empty()) {
      detail::launch_extract(table_descs_.as<detail::DeviceTable>(), boxes_.as<detail::DeviceBox>(),
                             static_cast<int>(boxes.size()), patch_size, channels_, out_device,
                             stream);
      check(cudaGetLastError(), "extract launch");
    }
    check(cudaEventRecord(queued_done_, stream), "record the cut");
    queued_ = true;
    queued_stream_ = stream;
  }

 private:
  struct Table {
    Table(DeviceAllocator* allocator, std::int64_t* host_waits)
        : data(allocator, host_waits),
          image(allocator, host_waits),
          scratch(allocator, host_waits) {}
    DeviceBuffer data, image, scratch;  // owned, reused across batches
  };

  // Queues the table of a packed device image (rows of w * C bytes) into `t` on `stream`.
  detail::DeviceTable build(const std::uint8_t* image, int h, int w, int C, Table* t,
                            cudaStream_t stream) {
    const long long stride = detail::table_stride(w, C);
    t->data.reserve(static_cast<std::size_t>(h + 1) * stride * sizeof(std::uint32_t), stream);
    t->scratch.reserve(detail::table_scratch_entries(h, w, C) * sizeof(std::uint32_t), stream);
    detail::launch_build_table(image, h, w, C, t->data.as<std::uint32_t>(), stride,
                               t->scratch.as<std::uint32_t>(), stream);
    check(cudaGetLastError(), "table build launch");
    return {t->data.as<std::uint32_t>(), stride, h, w};
  }

  // Before the synchronous calls reuse the buffers: the queued work must be done with them.
  void wait_for_queued() {
    if (!queued_) return;
    wait_for_event(queued_done_, "queued extraction");
    queued_ = false;
  }

  // Blocks the host until the device has got to `handle` (an event, a stream), counted in
  // host_waits_ when it had not yet.
  template <typename Handle>
  void wait_until(Handle handle, cudaError_t (*query)(Handle), cudaError_t (*block)(Handle),
                  const char* what) {
    const cudaError_t state = query(handle);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) check(state, what);
    ++host_waits_;
    check(block(handle), what);
  }
  void wait_for_event(cudaEvent_t event, const char* what) {
    wait_until(event, cudaEventQuery, cudaEventSynchronize, what);
  }
  void wait_for_stream(const char* what) {  // this extractor's own stream
    wait_until(stream_, cudaStreamQuery, cudaStreamSynchronize, what);
  }

  // On this extractor's device (the caller's DeviceScope).
  void launch(std::span<const CropBox> boxes, int p, float* out_device) {
    boxes_.reserve(boxes.size_bytes(), stream_);
    check(cudaMemcpyAsync(boxes_.as<void>(), boxes.data(), boxes.size_bytes(),
                          cudaMemcpyHostToDevice, stream_),
          "upload boxes");
    detail::launch_extract(table_descs_.as<detail::DeviceTable>(), boxes_.as<detail::DeviceBox>(),
                           static_cast<int>(boxes.size()), p, channels_, out_device, stream_);
    check(cudaGetLastError(), "extract launch");
  }

  int device_;
  std::int64_t host_waits_ = 0;  // host_waits(); the buffers below count theirs here
  DeviceAllocator* allocator_;   // not owned; nullptr: cudaMalloc
  cudaStream_t stream_ = nullptr;
  int channels_ = 0;
  std::vector<Table> tables_;               // device tables, reused across batches
  std::vector<detail::DeviceTable> descs_;  // descriptors of the current batch
  DeviceBuffer table_descs_, boxes_, output_;
  PinnedBuffer staging_;                // boxes and descriptors of extract_queued
  cudaEvent_t staging_read_ = nullptr;  // the last extract_queued's copies out of staging_
  cudaEvent_t queued_done_ = nullptr;   // the last extract_queued's work
  cudaStream_t queued_stream_ = nullptr;
  bool queued_ = false;  // extract_queued ran since the last synchronous call
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the "no device" error
    return 0;
  }
  return n;
}

std::unique_ptr<Extractor> make_cuda_extractor(int device, DeviceAllocator* allocator) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::runtime_error("CUDA device " + std::to_string(device) + " requested but " +
                             std::to_string(n) + " device(s) present");
  return std::make_unique<CudaExtractorImpl>(device, allocator);
}

}  // namespace saccade::kernels::cuda
