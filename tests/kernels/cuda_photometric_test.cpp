// The fused photometric augmentation's CUDA kernels against its CPU loop: every map drawn at
// random per view, RGB and grey, single rows and sequences of pieces, small and large patches
// (past 48 KB of shared memory per block for RGB at P = 64). Sums run in another order (the
// contrast mean, the blur) and the device's expf may differ in the last place, so values
// agree within a hundredth of a grey level, but for the rare one rounding carries across
// solarisation's threshold. Skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/extract.h"
#include "kernels/photometric.h"

namespace saccade::kernels {
namespace {

std::vector<PatchAugment> draw(int views, int patch_size, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<PatchAugment> out(static_cast<size_t>(views));
  for (PatchAugment& a : out) {
    a.jitter = u(rng) < 0.8f;
    std::vector<int> order = {0, 1, 2, 3};
    std::shuffle(order.begin(), order.end(), rng);
    for (int i = 0; i < 4; ++i) a.order[i] = static_cast<float>(order[static_cast<size_t>(i)]);
    a.brightness = 0.6f + 0.8f * u(rng);
    a.contrast = 0.6f + 0.8f * u(rng);
    a.saturation = 0.8f + 0.4f * u(rng);
    a.hue = -0.1f + 0.2f * u(rng);
    a.grayscale = u(rng) < 0.2f;
    a.blur_sigma = u(rng) < 0.5f ? 0.1f + u(rng) * 2.0f * patch_size / 14.0f : 0.0f;
    a.solarize = u(rng) < 0.2f;
    a.flip = u(rng) < 0.5f;
  }
  return out;
}

template <class T>
T* to_device(const std::vector<T>& host) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T) + 1), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(d);
}

TEST(CudaPhotometric, MatchesTheCpuLoop) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device present";
  std::mt19937_64 rng(7);
  for (const PatchLayout l : {PatchLayout{40, 1, 6, 3, 16}, PatchLayout{20, 3, 5, 3, 7},
                              PatchLayout{30, 2, 4, 1, 16}, PatchLayout{6, 1, 3, 3, 64},
                              // just under 48 KB of dynamic shared memory, over it with the taps
                              PatchLayout{4, 1, 2, 3, 45}, PatchLayout{4, 1, 2, 1, 78}}) {
    SCOPED_TRACE(testing::Message() << "views " << l.views << " pieces " << l.pieces << " C "
                                    << l.channels << " P " << l.patch_size);
    std::vector<std::uint8_t> in(static_cast<size_t>(l.values()));
    for (auto& x : in) x = static_cast<std::uint8_t>(rng() & 255);
    const std::vector<PatchAugment> views = draw(l.views, l.patch_size, rng);
    const float mean[3] = {0.45f, 0.45f, 0.45f}, stdev[3] = {0.226f, 0.226f, 0.226f};
    const Normalisation norm = normalisation(mean, stdev, l.channels);
    std::vector<float> want(in.size()), got(in.size());
    augment_patches(in.data(), want.data(), FloatType::kFloat32, l, views.data(), norm, 2);
    std::uint8_t* d_in = to_device(in);
    PatchAugment* d_views = to_device(views);
    float* d_out = to_device(std::vector<float>(in.size(), -1.0f));
    float* d_scratch = to_device(std::vector<float>(augment_scratch_floats(l)));
    augment_patches_cuda(d_in, d_out, FloatType::kFloat32, l, d_views, norm, d_scratch, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    const float tolerance = 0.01f / (255 * 0.226f);
    size_t off = 0;
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float e = std::fabs(got[i] - want[i]);
      off += e > tolerance;
      worst = std::fmax(worst, e);
    }
    EXPECT_LE(off, got.size() / 10000) << "max error " << worst;
    for (void* d : {static_cast<void*>(d_in), static_cast<void*>(d_views),
                    static_cast<void*>(d_out), static_cast<void*>(d_scratch)})
      cudaFree(d);
  }
}

}  // namespace
}  // namespace saccade::kernels
