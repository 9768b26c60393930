// Photometric augmentation of cut patches, fused: each view's colour jitter (brightness,
// contrast, saturation, hue in the view's own order), grayscale, a Gaussian blur within each
// patch, solarisation, a horizontal flip of each patch, and the normalisation, in one pass
// over uint8 patches into float32 (a chain of tensor ops reads and writes every value some
// fifty times). The maps are DINOv2's (torchvision's ColorJitter, GaussianBlur, Solarize).
// One interface, two backends: host memory on the CPU, device memory on a GPU (CUDA backend
// built with SACCADE_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/device_math.h"

namespace saccade::kernels {

// One view's draw, all floats so that a [views, 13] float array is an array of these.
struct PatchAugment {
  float jitter = 0;                    // 0 or 1: colour jitter at all
  float order[4] = {0, 1, 2, 3};       // jitter parts in the order applied (kBrightness...)
  float brightness = 1, contrast = 1;  // factors
  float saturation = 1, hue = 0;       // factor; shift in turns
  float grayscale = 0;                 // 0 or 1 (RGB only)
  float blur_sigma = 0;                // 0: no blur
  float solarize = 0, flip = 0;        // 0 or 1
};
static_assert(sizeof(PatchAugment) == 13 * sizeof(float));

// Jitter parts, as PatchAugment::order names them.
inline constexpr int kJitterBrightness = 0, kJitterContrast = 1, kJitterSaturation = 2,
                     kJitterHue = 3;

// Patches [rows, tokens, channels, P, P] where rows = pieces * views and row r belongs to view
// r % views (a view's pieces: its glimpses, step-major). Contrast blends with the mean
// luminance of the whole view (all its rows and tokens).
struct PatchLayout {
  int views = 0, pieces = 1, tokens = 0, channels = 0, patch_size = 0;
  std::int64_t rows() const { return std::int64_t{pieces} * views; }
  std::int64_t values() const {
    return rows() * tokens * channels * std::int64_t{patch_size} * patch_size;
  }
};

// Per channel: value = pixel * scale - shift, i.e. (pixel / 255 - mean) / std.
struct Normalisation {
  float scale[3] = {1, 1, 1}, shift[3] = {0, 0, 0};
};
Normalisation normalisation(const float* mean, const float* stdev, int channels);

// Throws std::invalid_argument naming the field when the layout is empty, channels is not 1
// or 3, or patch_size is not in [1, 128].
void validate_patch_layout(const PatchLayout& layout);

// CPU: `in` and `out` (of out_type) in host memory, `views` has layout.views entries. num_threads:
// 0 = all hardware threads.
void augment_patches(const std::uint8_t* in, void* out, FloatType out_type,
                     const PatchLayout& layout, const PatchAugment* views,
                     const Normalisation& norm, int num_threads = 0);

// CUDA: `in`, `out`, `views` and `scratch` (augment_scratch_floats(layout) floats) in the
// memory of the current device; queued on `stream` (a cudaStream_t; nullptr: the default
// stream), no wait. Throws std::runtime_error when the CUDA backend is not compiled in, and
// std::invalid_argument when a patch does not fit a block's shared memory on this device.
void augment_patches_cuda(const std::uint8_t* in, void* out, FloatType out_type,
                          const PatchLayout& layout, const PatchAugment* views,
                          const Normalisation& norm, float* scratch, void* stream);
std::size_t augment_scratch_floats(const PatchLayout& layout);

}  // namespace saccade::kernels
