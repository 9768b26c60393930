// Per-view augmentations of DINOv2 (facebookresearch/dinov2), drawn here, on the
// data actor, from the view's seed, and applied to the view's patches on the
// learner's device (workers/ssl/view_augment.h). Patches travel as uint8 box
// averages with the draw beside them, so a view is still a function of (seed,
// image), and the host does no per-pixel work beyond cutting.
//
// They act on a view's extracted patches rather than on a pixel crop: every
// view is cut from one integral image, so there is no crop to augment. Colour
// jitter, grayscale and solarisation are per-pixel maps; brightness, saturation
// and grayscale are affine, so they commute with the box filter and give exactly
// what augmenting the image first would. Contrast uses the mean of the view (as
// torchvision uses the mean of the crop). Hue is torchvision's per-pixel HSV
// rotation. Gaussian blur runs inside each P x P patch with sigma scaled from
// DINOv2's 224-pixel crop of 14-pixel patches (sigma * P / 14), borders
// replicated per patch: an approximation that never mixes patches which are not
// neighbours in the image.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace saccade::data {

// Probabilities of the photometric augmentations of one view.
struct PhotometricSpec {
  float jitter_p = 0.8f;     // colour jitter (0.4, 0.4, 0.2, 0.1)
  float grayscale_p = 0.2f;  // RGB only
  float blur_p = 0.5f;       // sigma uniform in [0.1, 2.0] (224-pixel crop scale)
  float solarize_p = 0.0f;   // threshold 128
};

// The parts of colour jitter, as `ViewAugment::order` names them.
enum JitterPart : uint8_t { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

// One view's drawn augmentation, applied in DINOv2's order: the jitter parts in
// `order` (when `jitter`), grayscale, blur, solarisation, then the horizontal flip.
// The default is the identity.
struct ViewAugment {
  bool jitter = false;
  std::array<uint8_t, 4> order = {kBrightness, kContrast, kSaturation, kHue};
  float brightness = 1, contrast = 1, saturation = 1, hue = 0;  // hue in turns
  bool grayscale = false;
  float blur_sigma = 0;  // in patch pixels; 0 = no blur
  bool solarize = false;
  bool flip = false;  // mirrors each patch's columns (positions are mirrored by the cutter)
};

// Draws one view's augmentation from `rng`, in the order the draws have always
// had (jitter order then its factors, grayscale, blur, solarisation, flip), so
// the views of a (seed, image) do not change with where they are applied.
ViewAugment draw_view_augment(const PhotometricSpec& spec, int channels, int patch_size,
                              std::mt19937_64& rng);

// A ViewAugment as a row of kViewAugmentFloats floats, the form it travels in
// (a float32 [views, kViewAugmentFloats] tensor) and the device reads. Columns:
inline constexpr int kAugJitter = 0;      // 0 or 1
inline constexpr int kAugOrder = 1;       // 4 columns: a permutation of 0..3
inline constexpr int kAugBrightness = 5;  // factor, [0.6, 1.4]
inline constexpr int kAugContrast = 6;    // factor, [0.6, 1.4]
inline constexpr int kAugSaturation = 7;  // factor, [0.8, 1.2]
inline constexpr int kAugHue = 8;         // turns, [-0.1, 0.1]
inline constexpr int kAugGrayscale = 9;   // 0 or 1
inline constexpr int kAugBlurSigma = 10;  // 0 or (0, 2 * P / 14]
inline constexpr int kAugSolarize = 11;   // 0 or 1
inline constexpr int kAugFlip = 12;       // 0 or 1
inline constexpr int kViewAugmentFloats = 13;

void encode_view_augment(const ViewAugment& augment, float* row);
// The augmentation in `row`, or nullopt with `why` naming the bad column when
// the row is not one draw_view_augment could have made for patch side `patch_size`.
std::optional<ViewAugment> decode_view_augment(const float* row, int patch_size, std::string& why);

}  // namespace saccade::data
