// Per-view augmentations of DINOv2 (facebookresearch/dinov2), applied to a view's
// extracted patches rather than to a pixel crop: every view is cut from one
// integral image, so there is no crop to augment.
//
// Colour jitter, grayscale and solarisation are per-pixel maps; brightness,
// saturation and grayscale are affine, so they commute with the box filter and
// give exactly what augmenting the image first would. Contrast uses the mean
// of the view (as torchvision uses the mean of the crop). Hue is a per-pixel
// HSV rotation of the patch pixels. Gaussian blur runs inside each P x P patch
// with sigma scaled from DINOv2's 224-pixel crop of 14-pixel patches (sigma *
// P / 14), borders replicated per patch: an approximation that never mixes
// patches which are not neighbours in the image.
#pragma once

#include <cstdint>
#include <random>

namespace saccade::data {

// Probabilities of the photometric augmentations of one view.
struct PhotometricSpec {
  float jitter_p = 0.8f;     // colour jitter (0.4, 0.4, 0.2, 0.1)
  float grayscale_p = 0.2f;  // RGB only
  float blur_p = 0.5f;       // sigma uniform in [0.1, 2.0] (224-pixel crop scale)
  float solarize_p = 0.0f;   // threshold 128
};

// One view: `tokens` patches of `channels` x P x P floats on the 0..255 scale.
struct ViewPixels {
  float* patches = nullptr;
  int64_t tokens = 0;
  int channels = 0;
  int patch_size = 0;
};

// Applies the photometric augmentations in place (DINOv2's order: jitter in a
// random order of its four parts, grayscale, blur, solarise); values stay in 0..255.
void augment_photometric(const ViewPixels& view, const PhotometricSpec& spec, std::mt19937_64& rng);

// Mirrors the view horizontally: each patch's columns are reversed and every
// position's x becomes extent_x - x, which is exactly the view of the
// horizontally flipped image. positions: [tokens, 3].
void flip_horizontal(const ViewPixels& view, float* positions, float extent_x);

// value = (value / 255 - mean[c]) / std[c]; mean and std have `channels` entries.
void normalize(const ViewPixels& view, const float* mean, const float* std);

}  // namespace saccade::data
