// The CPU backend of kernels/photometric.h: a view per task; per patch, the pixels jittered
// into a tile, the tile blurred, then solarised, flipped and normalised on the way out.
#include "kernels/photometric.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/extract.h"
#include "kernels/parallel.h"
#include "kernels/photometric_ops.h"

#ifdef SACCADE_KERNELS_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace saccade::kernels {
namespace {

namespace ph = photometric;

// The mean luminance of view `v` after the jitter parts before contrast (the value contrast
// blends with), summed in double.
float contrast_mean(const std::uint8_t* in, const PatchLayout& l, int v, const PatchAugment& a) {
  const int before = ph::contrast_place(a);
  if (before == 4) return 0;
  const int64_t plane = int64_t{l.patch_size} * l.patch_size;
  double sum = 0;
  for (int piece = 0; piece < l.pieces; ++piece) {
    const int64_t row = int64_t{piece} * l.views + v;
    for (int t = 0; t < l.tokens; ++t) {
      const std::uint8_t* patch = in + (row * l.tokens + t) * l.channels * plane;
      for (int64_t i = 0; i < plane; ++i) {
        float px[3] = {0, 0, 0};
        for (int c = 0; c < l.channels; ++c) px[c] = patch[c * plane + i];
        ph::jitter(px, l.channels, a, 0, before, 0);
        sum += ph::luminance(px, l.channels);
      }
    }
  }
  return static_cast<float>(sum / static_cast<double>(int64_t{l.pieces} * l.tokens * plane));
}

void augment_view(const std::uint8_t* in, void* out, FloatType out_type, const PatchLayout& l,
                  int v, const PatchAugment& a, const Normalisation& norm) {
  const int p = l.patch_size, channels = l.channels;
  const int64_t plane = int64_t{p} * p;
  const float mean = contrast_mean(in, l, v, a);
  const int radius = ph::blur_radius(a.blur_sigma, p);
  std::vector<float> taps(static_cast<size_t>(2 * radius + 1));
  if (radius > 0) ph::blur_taps(a.blur_sigma, radius, taps.data());
  std::vector<float> tile(static_cast<size_t>(channels * plane)), tmp(tile.size());
  const bool gray = channels == 3 && a.grayscale != 0;
  for (int piece = 0; piece < l.pieces; ++piece) {
    const int64_t row = int64_t{piece} * l.views + v;
    for (int t = 0; t < l.tokens; ++t) {
      const int64_t first = (row * l.tokens + t) * channels * plane;
      for (int64_t i = 0; i < plane; ++i) {
        float px[3] = {0, 0, 0};
        for (int c = 0; c < channels; ++c) px[c] = in[first + c * plane + i];
        ph::jitter(px, channels, a, 0, 4, mean);
        if (gray) px[0] = px[1] = px[2] = ph::gray_of(px[0], px[1], px[2]);
        for (int c = 0; c < channels; ++c) tile[static_cast<size_t>(c * plane + i)] = px[c];
      }
      if (radius > 0) {
        for (int c = 0; c < channels; ++c) {
          const float* x = tile.data() + c * plane;
          float* y = tmp.data() + c * plane;
          for (int r = 0; r < p; ++r)  // along each row, then along each column
            for (int k = 0; k < p; ++k)
              y[r * p + k] = ph::blur_at(x + r * p, 1, p, k, taps.data(), radius);
          float* z = tile.data() + c * plane;
          for (int r = 0; r < p; ++r)
            for (int k = 0; k < p; ++k)
              z[r * p + k] = ph::blur_at(y + k, p, p, r, taps.data(), radius);
        }
      }
      const bool flip = a.flip != 0;
      for (int c = 0; c < channels; ++c)
        for (int r = 0; r < p; ++r)
          for (int k = 0; k < p; ++k) {
            const float value =
                tile[static_cast<size_t>(c * plane + r * p + (flip ? p - 1 - k : k))];
            store_value(out, out_type, first + c * plane + r * p + k,
                        ph::finish(value, a, norm, c));
          }
    }
  }
}

}  // namespace

Normalisation normalisation(const float* mean, const float* stdev, int channels) {
  Normalisation n;
  for (int c = 0; c < channels && c < 3; ++c) {
    n.scale[c] = 1.0f / (255.0f * stdev[c]);
    n.shift[c] = mean[c] / stdev[c];
  }
  return n;
}

void validate_patch_layout(const PatchLayout& l) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("patch layout: " + what); };
  if (l.views < 0 || l.pieces < 1 || l.tokens < 0)
    fail("views, pieces, tokens must be >= 0, >= 1, >= 0, got " + std::to_string(l.views) + ", " +
         std::to_string(l.pieces) + ", " + std::to_string(l.tokens));
  if (l.channels != 1 && l.channels != 3)
    fail("channels must be 1 or 3, got " + std::to_string(l.channels));
  if (l.patch_size < 1 || l.patch_size > kMaxPatchSize)
    fail("patch_size must be in [1, " + std::to_string(kMaxPatchSize) + "], got " +
         std::to_string(l.patch_size));
}

void augment_patches(const std::uint8_t* in, void* out, FloatType out_type,
                     const PatchLayout& layout, const PatchAugment* views,
                     const Normalisation& norm, int num_threads) {
  validate_patch_layout(layout);
  parallel_for(num_threads, layout.views,
               [&](int v) { augment_view(in, out, out_type, layout, v, views[v], norm); });
}

std::size_t augment_scratch_floats(const PatchLayout& layout) {
  return static_cast<std::size_t>(layout.rows() * layout.tokens + layout.views);
}

void augment_patches_cuda(const std::uint8_t* in, void* out, FloatType out_type,
                          const PatchLayout& layout, const PatchAugment* views,
                          const Normalisation& norm, float* scratch, void* stream) {
  validate_patch_layout(layout);
#ifdef SACCADE_KERNELS_CUDA
  const cudaError_t err = cuda::detail::launch_augment_patches(
      in, out, out_type, layout, views, norm, scratch, static_cast<cudaStream_t>(stream));
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear it
  const std::size_t bytes = (2 * std::size_t{static_cast<unsigned>(layout.channels)} *
                                 layout.patch_size * layout.patch_size +
                             2 * kMaxPatchSize) *
                            sizeof(float);  // the patch twice and the taps
  if (bytes > 48 * 1024 && (err == cudaErrorInvalidValue || err == cudaErrorLaunchOutOfResources))
    throw std::invalid_argument(
        "augment_patches_cuda: a patch of " + std::to_string(layout.channels) + " x " +
        std::to_string(layout.patch_size) + " x " + std::to_string(layout.patch_size) + " needs " +
        std::to_string((bytes + 1023) / 1024) +
        " KB of shared memory per block, more than this device allows (" + cudaGetErrorString(err) +
        ")");
  throw std::runtime_error(std::string("augment_patches_cuda: ") + cudaGetErrorString(err));
#else
  (void)in, (void)out, (void)out_type, (void)views, (void)norm, (void)scratch, (void)stream;
  throw std::runtime_error(
      "augment_patches_cuda: this build has no CUDA backend (configure with -DSACCADE_CUDA=ON)");
#endif
}

}  // namespace saccade::kernels
