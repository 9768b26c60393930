// CUDA backend against the CPU backend: bit-identical patches (same uint32 table,
// same rounding and float formula). Every test skips when no device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/extract.h"
#include "test_images.h"

namespace saccade::kernels {
namespace {

using testing::make_image;
using testing::TestImage;

#define SKIP_WITHOUT_DEVICE() \
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device present"

std::vector<CropBox> random_boxes(int n, int num_images, int h, int w, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<CropBox> boxes;
  for (int i = 0; i < n; ++i) {
    const float side = std::exp2(-5.5f * u(rng)) * std::min(h, w) * 1.2f;  // 2 px .. 1.2x image
    const float cx = (u(rng) * 1.2f - 0.1f) * w, cy = (u(rng) * 1.2f - 0.1f) * h;
    boxes.push_back({cx - side / 2, cy - side / 2, cx + side / 2, cy + side * 0.6f,
                     static_cast<int>(rng() % num_images)});
  }
  return boxes;
}

void expect_same_as_cpu(const std::vector<TestImage>& imgs, const std::vector<CropBox>& boxes,
                        int p) {
  std::vector<ImageView> views;
  for (const auto& i : imgs) views.push_back(i.view());
  auto cpu = make_extractor({Backend::kCpu, 2, 0});
  auto gpu = make_extractor({Backend::kCuda, 0, 0});
  ASSERT_EQ(gpu->backend(), Backend::kCuda);
  cpu->set_images(views);
  gpu->set_images(views);
  const std::size_t n = boxes.size() * imgs[0].channels * p * p;
  std::vector<float> a(n), b(n, -1.0f);
  cpu->extract(boxes, p, a.data());
  gpu->extract(boxes, p, b.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
}

TEST(CudaExtract, RgbBatchMatchesCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  std::vector<TestImage> imgs = {make_image(333, 517, 3, 1, 1, 3), make_image(1000, 77, 3, 2, 0)};
  for (int p : {1, 5, 16, 32}) expect_same_as_cpu(imgs, random_boxes(500, 2, 333, 517, p), p);
}

TEST(CudaExtract, GrayAndLargePatchesMatchCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  std::vector<TestImage> imgs = {make_image(700, 900, 1, 3, 1)};
  for (int p : {16, 100}) expect_same_as_cpu(imgs, random_boxes(200, 1, 700, 900, p), p);
}

TEST(CudaExtract, LargeImageWrapsAndStaysExact) {
  SKIP_WITHOUT_DEVICE();
  std::vector<TestImage> imgs = {make_image(4500, 4500, 3, 4, 2)};  // all 255: table wraps
  std::vector<CropBox> boxes = {{0, 0, 4500, 4500, 0}, {4000, 4000, 4600, 4600, 0}};
  for (int p : {1, 2, 16}) expect_same_as_cpu(imgs, boxes, p);
}

// Queued on caller streams, from images in device memory: two batches on two streams back
// to back (the second rebuilds the tables the first cut reads, on another stream), then a
// synchronous call; every patch bit-identical to the CPU backend's.
void queued_cuts_match_cpu(DeviceAllocator* allocator) {
  auto gpu = cuda::make_cuda_extractor(0, allocator);
  auto cpu = make_extractor({Backend::kCpu, 2, 0});
  const std::vector<std::vector<TestImage>> batches = {
      {make_image(333, 517, 3, 1, 1), make_image(1000, 77, 3, 2, 0)},
      {make_image(480, 640, 3, 5, 3), make_image(64, 64, 3, 6, 1), make_image(200, 300, 3, 7, 0)}};
  cudaStream_t streams[2];
  for (cudaStream_t& s : streams) ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const int p = 16;
  std::vector<void*> device_memory;
  std::vector<float*> outs;
  std::vector<std::vector<CropBox>> boxes;
  for (size_t k = 0; k < batches.size(); ++k) {
    std::vector<ImageView> views;
    for (const TestImage& img : batches[k]) {
      const size_t bytes = img.pixels.size();  // packed rows: make_image without padding
      void* d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
      device_memory.push_back(d);
      ASSERT_EQ(cudaMemcpy(d, img.pixels.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      views.push_back({static_cast<const std::uint8_t*>(d), img.height, img.width, 3, 0});
    }
    const int n_images = static_cast<int>(batches[k].size());
    boxes.push_back(random_boxes(3000, n_images, 300, 300, 10 + k));
    void* out = nullptr;
    ASSERT_EQ(cudaMalloc(&out, boxes[k].size() * 3 * p * p * sizeof(float)), cudaSuccess);
    device_memory.push_back(out);
    outs.push_back(static_cast<float*>(out));
    gpu->extract_queued(views, boxes[k], p, outs[k], streams[k]);
  }
  for (size_t k = 0; k < batches.size(); ++k) {
    std::vector<float> got(boxes[k].size() * 3 * p * p), want(got.size());
    ASSERT_EQ(cudaStreamSynchronize(streams[k]), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), outs[k], got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<ImageView> host;
    for (const TestImage& img : batches[k]) host.push_back(img.view());
    cpu->set_images(host);
    cpu->extract(boxes[k], p, want.data());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << "batch " << k << " element " << i;
  }
  // A synchronous call after queued ones cuts its own batch.
  std::vector<ImageView> host;
  for (const TestImage& img : batches[0]) host.push_back(img.view());
  const std::vector<CropBox> last = random_boxes(500, 2, 333, 517, 3);
  std::vector<float> got(last.size() * 3 * 5 * 5), want(got.size());
  gpu->set_images(host);
  gpu->extract(last, 5, got.data());
  cpu->set_images(host);
  cpu->extract(last, 5, want.data());
  EXPECT_EQ(got, want);
  for (void* d : device_memory) cudaFree(d);
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
}

TEST(CudaExtract, QueuedCutsOnTheCallersStreamsMatchCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  queued_cuts_match_cpu(nullptr);
}

// host_waits() counts the times a call blocked the host on the device: none for a queued cut
// whose buffers fit and whose previous work is done, at least one when a buffer must grow
// (its old memory is given back only once the device is done with it).
TEST(CudaExtract, CountsTheWaitsItMakesForTheDevice) {
  SKIP_WITHOUT_DEVICE();
  auto gpu = cuda::make_cuda_extractor(0, nullptr);
  const TestImage img = make_image(333, 517, 3, 1, 1);
  void* image = nullptr;
  ASSERT_EQ(cudaMalloc(&image, img.pixels.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(image, img.pixels.data(), img.pixels.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  const std::vector<ImageView> views = {
      {static_cast<const std::uint8_t*>(image), img.height, img.width, 3, 0}};
  const int p = 8;
  const std::vector<CropBox> few = random_boxes(100, 1, 333, 517, 1);
  const std::vector<CropBox> many = random_boxes(20000, 1, 333, 517, 2);
  void* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, many.size() * 3 * p * p * sizeof(float)), cudaSuccess);
  gpu->extract_queued(views, few, p, static_cast<float*>(out), nullptr);  // buffers sized here
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::int64_t settled = gpu->host_waits();
  gpu->extract_queued(views, few, p, static_cast<float*>(out), nullptr);
  EXPECT_EQ(gpu->host_waits(), settled) << "same sizes, previous cut done: no wait";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  gpu->extract_queued(views, many, p, static_cast<float*>(out), nullptr);
  EXPECT_GT(gpu->host_waits(), settled) << "the boxes' buffer grew 200-fold";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
  cudaFree(image);
}

// cudaMalloc, counted: what the extractor takes and gives back.
class CountingAllocator final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes, void* stream) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc");
    ++allocations, bytes_taken += bytes, live_ += 1;
    return p;
  }
  void release(void* memory) override {
    cudaFree(memory);
    live_ -= 1;
  }
  int live() const { return live_; }
  int allocations = 0;
  std::size_t bytes_taken = 0;

 private:
  int live_ = 0;
};

// A learner hands LibTorch's caching allocator (ExtractorOptions::device_allocator): every
// table and buffer comes from it and goes back to it, and the cuts stay exact.
TEST(CudaExtract, TakesItsDeviceMemoryFromTheAllocatorItIsGiven) {
  SKIP_WITHOUT_DEVICE();
  CountingAllocator allocator;
  queued_cuts_match_cpu(&allocator);
  // A table per image of the larger batch (3), the descriptors, the boxes, the output.
  EXPECT_GE(allocator.allocations, 6);
  // At least the 480 x 640 RGB image's table: 481 rows of 641 x 3 uint32.
  EXPECT_GE(allocator.bytes_taken, std::size_t{481} * 641 * 3 * 4);
  EXPECT_EQ(allocator.live(), 0) << "everything given back when the extractor goes";
}

TEST(CudaExtract, ExtractToDeviceAndBadInput) {
  SKIP_WITHOUT_DEVICE();
  auto gpu = cuda::make_cuda_extractor(0);
  const TestImage img = make_image(64, 64, 3, 1, 1);
  const ImageView view = img.view();
  gpu->set_images(std::span<const ImageView>(&view, 1));
  const std::vector<CropBox> bad = {{0, 0, 4, 4, 1}};
  std::vector<float> out(3 * 4 * 4);
  EXPECT_THROW(gpu->extract(bad, 4, out.data()), std::invalid_argument);
  EXPECT_THROW(gpu->extract({}, 0, out.data()), std::invalid_argument);
  EXPECT_THROW(cuda::make_cuda_extractor(cuda::device_count()), std::runtime_error);
}

}  // namespace
}  // namespace saccade::kernels
