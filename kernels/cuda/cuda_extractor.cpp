// The CUDA Extractor: device memory, streams and validation around the kernels of
// extract_cuda.cu. Host C++20 (g++), CUDA runtime API only.
#include <cuda_runtime_api.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"

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

// Device buffer that only grows; owns its allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), size_(o.size_) {
    o.ptr_ = nullptr;
    o.size_ = 0;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
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

class CudaExtractorImpl final : public Extractor {
 public:
  explicit CudaExtractorImpl(int device) : device_(device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  ~CudaExtractorImpl() override {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }

  Backend backend() const override { return Backend::kCuda; }
  int num_images() const override { return static_cast<int>(descs_.size()); }
  int channels() const override { return channels_; }

  void set_images(std::span<const ImageView> images) override {
    for (std::size_t i = 0; i < images.size(); ++i) {
      validate_image(images[i], ("images[" + std::to_string(i) + "]").c_str());
      if (images[i].channels != images[0].channels)
        throw std::invalid_argument("images[" + std::to_string(i) +
                                    "].channels must equal images[0].channels");
    }
    check(cudaSetDevice(device_), "cudaSetDevice");
    if (tables_.size() < images.size()) tables_.resize(images.size());
    descs_.clear();
    channels_ = images.empty() ? 0 : images[0].channels;
    for (std::size_t i = 0; i < images.size(); ++i) descs_.push_back(build(images[i], &tables_[i]));
    table_descs_.reserve(descs_.size() * sizeof(detail::DeviceTable) + 1);
    check(cudaMemcpyAsync(table_descs_.as<void>(), descs_.data(),
                          descs_.size() * sizeof(detail::DeviceTable), cudaMemcpyHostToDevice,
                          stream_),
          "copy table descriptors");
    check(cudaStreamSynchronize(stream_), "table build");
  }

  void extract(std::span<const CropBox> boxes, int patch_size, float* out) override {
    validate_crops(boxes, num_images(), patch_size);
    if (boxes.empty()) return;
    if (out == nullptr) throw std::invalid_argument("out must not be null");
    const std::size_t bytes = boxes.size() * channels_ * patch_size * patch_size * sizeof(float);
    output_.reserve(bytes);
    launch(boxes, patch_size, output_.as<float>());
    check(cudaMemcpyAsync(out, output_.as<void>(), bytes, cudaMemcpyDeviceToHost, stream_),
          "copy patches");
    check(cudaStreamSynchronize(stream_), "extract");
  }

  void extract_to_device(std::span<const CropBox> boxes, int patch_size,
                         float* out_device) override {
    validate_crops(boxes, num_images(), patch_size);
    if (boxes.empty()) return;
    if (out_device == nullptr) throw std::invalid_argument("out_device must not be null");
    launch(boxes, patch_size, out_device);
    check(cudaStreamSynchronize(stream_), "extract");
  }

 private:
  struct Table {
    DeviceBuffer data, image, scratch;  // owned, reused across batches
  };

  detail::DeviceTable build(const ImageView& view, Table* t) {
    const int C = view.channels, h = view.height, w = view.width;
    const std::size_t src_stride =
        view.row_stride ? view.row_stride : static_cast<std::size_t>(w) * C;
    const long long stride = detail::table_stride(w, C);
    t->data.reserve(static_cast<std::size_t>(h + 1) * stride * sizeof(std::uint32_t));
    t->image.reserve(static_cast<std::size_t>(h) * w * C);
    t->scratch.reserve(detail::table_scratch_entries(h, w, C) * sizeof(std::uint32_t));
    check(cudaMemcpy2DAsync(t->image.as<void>(), static_cast<std::size_t>(w) * C, view.data,
                            src_stride, static_cast<std::size_t>(w) * C, h, cudaMemcpyHostToDevice,
                            stream_),
          "upload image");
    detail::launch_build_table(t->image.as<std::uint8_t>(), h, w, C, t->data.as<std::uint32_t>(),
                               stride, t->scratch.as<std::uint32_t>(), stream_);
    check(cudaGetLastError(), "table build launch");
    return {t->data.as<std::uint32_t>(), stride, h, w};
  }

  void launch(std::span<const CropBox> boxes, int p, float* out_device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    boxes_.reserve(boxes.size_bytes());
    check(cudaMemcpyAsync(boxes_.as<void>(), boxes.data(), boxes.size_bytes(),
                          cudaMemcpyHostToDevice, stream_),
          "upload boxes");
    detail::launch_extract(table_descs_.as<detail::DeviceTable>(), boxes_.as<detail::DeviceBox>(),
                           static_cast<int>(boxes.size()), p, channels_, out_device, stream_);
    check(cudaGetLastError(), "extract launch");
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  int channels_ = 0;
  std::vector<Table> tables_;               // device tables, reused across batches
  std::vector<detail::DeviceTable> descs_;  // descriptors of the current batch
  DeviceBuffer table_descs_, boxes_, output_;
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

std::unique_ptr<Extractor> make_cuda_extractor(int device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::runtime_error("CUDA device " + std::to_string(device) + " requested but " +
                             std::to_string(n) + " device(s) present");
  return std::make_unique<CudaExtractorImpl>(device);
}

}  // namespace saccade::kernels::cuda
