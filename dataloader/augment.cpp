#include "dataloader/augment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/geometry.h"

namespace saccade::data {
namespace {

using kernels::uniform01;

float uniform(std::mt19937_64& rng, float lo, float hi) {
  return lo + static_cast<float>(uniform01(rng)) * (hi - lo);
}
bool chance(std::mt19937_64& rng, float p) {
  return p > 0 && uniform01(rng) < p;
}

}  // namespace

ViewAugment draw_view_augment(const PhotometricSpec& spec, int channels, int patch_size,
                              std::mt19937_64& rng) {
  ViewAugment a;
  if (chance(rng, spec.jitter_p)) {
    a.jitter = true;
    for (int i = 3; i > 0; --i)
      std::swap(a.order[i], a.order[static_cast<int>(uniform01(rng) * (i + 1))]);
    for (uint8_t part : a.order) {
      if (part == kBrightness) a.brightness = uniform(rng, 0.6f, 1.4f);
      if (part == kContrast) a.contrast = uniform(rng, 0.6f, 1.4f);
      if (part == kSaturation && channels == 3) a.saturation = uniform(rng, 0.8f, 1.2f);
      if (part == kHue && channels == 3) a.hue = uniform(rng, -0.1f, 0.1f);
    }
  }
  a.grayscale = channels == 3 && chance(rng, spec.grayscale_p);
  if (chance(rng, spec.blur_p))
    a.blur_sigma = uniform(rng, 0.1f, 2.0f) * static_cast<float>(patch_size) / 14.0f;
  a.solarize = chance(rng, spec.solarize_p);
  a.flip = uniform01(rng) < 0.5;
  return a;
}

void encode_view_augment(const ViewAugment& a, float* row) {
  row[kAugJitter] = a.jitter ? 1.0f : 0.0f;
  for (int i = 0; i < 4; ++i) row[kAugOrder + i] = a.order[i];
  row[kAugBrightness] = a.brightness;
  row[kAugContrast] = a.contrast;
  row[kAugSaturation] = a.saturation;
  row[kAugHue] = a.hue;
  row[kAugGrayscale] = a.grayscale ? 1.0f : 0.0f;
  row[kAugBlurSigma] = a.blur_sigma;
  row[kAugSolarize] = a.solarize ? 1.0f : 0.0f;
  row[kAugFlip] = a.flip ? 1.0f : 0.0f;
}

std::optional<ViewAugment> decode_view_augment(const float* row, int patch_size, std::string& why) {
  static constexpr const char* kNames[kViewAugmentFloats] = {
      "jitter",     "order[0]", "order[1]",  "order[2]",   "order[3]", "brightness", "contrast",
      "saturation", "hue",      "grayscale", "blur_sigma", "solarize", "flip"};
  auto in = [&](int column, float lo, float hi) {
    const float v = row[column];
    if (std::isfinite(v) && v >= lo && v <= hi) return true;
    why = fmt::format("augmentation {} is {}, expected [{}, {}]", kNames[column], v, lo, hi);
    return false;
  };
  auto flag = [&](int column) {
    if (row[column] == 0.0f || row[column] == 1.0f) return true;
    why = fmt::format("augmentation {} is {}, expected 0 or 1", kNames[column], row[column]);
    return false;
  };
  if (!flag(kAugJitter) || !flag(kAugGrayscale) || !flag(kAugSolarize) || !flag(kAugFlip))
    return std::nullopt;
  ViewAugment a;
  unsigned seen = 0;
  for (int i = 0; i < 4; ++i) {
    const float v = row[kAugOrder + i];
    if (!(v == 0.0f || v == 1.0f || v == 2.0f || v == 3.0f) || (seen >> static_cast<int>(v) & 1)) {
      why = fmt::format("augmentation order {{{}, {}, {}, {}}} is not a permutation of 0..3",
                        row[kAugOrder], row[kAugOrder + 1], row[kAugOrder + 2], row[kAugOrder + 3]);
      return std::nullopt;
    }
    seen |= 1u << static_cast<int>(v);
    a.order[i] = static_cast<uint8_t>(v);
  }
  const float max_sigma = 2.0f * static_cast<float>(patch_size) / 14.0f;
  if (!in(kAugBrightness, 0.6f, 1.4f) || !in(kAugContrast, 0.6f, 1.4f) ||
      !in(kAugSaturation, 0.8f, 1.2f) || !in(kAugHue, -0.1f, 0.1f) ||
      !in(kAugBlurSigma, 0.0f, max_sigma))
    return std::nullopt;
  a.jitter = row[kAugJitter] == 1.0f;
  a.brightness = row[kAugBrightness];
  a.contrast = row[kAugContrast];
  a.saturation = row[kAugSaturation];
  a.hue = row[kAugHue];
  a.grayscale = row[kAugGrayscale] == 1.0f;
  a.blur_sigma = row[kAugBlurSigma];
  a.solarize = row[kAugSolarize] == 1.0f;
  a.flip = row[kAugFlip] == 1.0f;
  return a;
}

}  // namespace saccade::data
