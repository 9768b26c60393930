// The per-pixel maps of kernels/photometric.h, shared by the CPU loop (photometric.cpp) and the
// CUDA kernels (cuda/photometric_cuda.cu): the same float operations in the same order on
// both (and as the tensor ops they replace: product, then sum, then clamp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/device_math.h"
#include "kernels/photometric.h"

namespace saccade::kernels::photometric {

SACCADE_HD float clamp255(float x) {
  return fminf(fmaxf(x, 0.0f), 255.0f);
}

SACCADE_HD float gray_of(float r, float g, float b) {
  return 0.299f * r + 0.587f * g + 0.114f * b;
}

// The value contrast and the pass before it measure: grey for RGB, the value itself for grey.
SACCADE_HD float luminance(const float* px, int channels) {
  return channels == 3 ? gray_of(px[0], px[1], px[2]) : px[0];
}

SACCADE_HD float blend(float x, float f, float other) {
  return clamp255(f * x + (1 - f) * other);
}

// torchvision's adjust_hue: RGB -> HSV, the hue turned by `shift` turns, -> RGB; grey pixels
// keep their value.
SACCADE_HD void rotate_hue(float* px, float shift) {
  const float r = px[0], g = px[1], b = px[2];
  const float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b));
  const float chroma = mx - mn;
  if (!(chroma > 0)) return;
  float h = mx == r ? (g - b) / chroma : mx == g ? 2 + (b - r) / chroma : 4 + (r - g) / chroma;
  h = h / 6 + shift;
  h = h - floorf(h);
  const float s = chroma / mx, hh = h * 6;
  int sector = static_cast<int>(fmodf(floorf(hh), 6.0f));
  sector = sector < 0 ? 0 : sector > 5 ? 5 : sector;
  const float frac = hh - floorf(hh);
  const float p = mx * (1 - s), q = mx * (1 - s * frac), t = mx * (1 - s * (1 - frac));
  const float rs[6] = {mx, q, p, p, t, mx}, gs[6] = {t, mx, mx, q, p, p},
              bs[6] = {p, p, t, mx, mx, q};
  px[0] = rs[sector];
  px[1] = gs[sector];
  px[2] = bs[sector];
}

// Where contrast stands in a view's jitter order (4: not applied).
SACCADE_HD int contrast_place(const PatchAugment& a) {
  if (a.jitter == 0) return 4;
  for (int place = 0; place < 4; ++place)
    if (static_cast<int>(a.order[place]) == kJitterContrast) return place;
  return 4;
}

// Applies the jitter parts at places [first, last) of the view's order to one pixel (its
// `channels` values); contrast blends with `mean`. Saturation and hue leave grey alone.
SACCADE_HD void jitter(float* px, int channels, const PatchAugment& a, int first, int last,
                       float mean) {
  if (a.jitter == 0) return;
  for (int place = first; place < last; ++place) {
    const int part = static_cast<int>(a.order[place]);
    if (part == kJitterBrightness) {
      for (int c = 0; c < channels; ++c) px[c] = clamp255(px[c] * a.brightness);
    } else if (part == kJitterContrast) {
      for (int c = 0; c < channels; ++c) px[c] = blend(px[c], a.contrast, mean);
    } else if (channels == 3 && part == kJitterSaturation) {
      const float y = gray_of(px[0], px[1], px[2]);
      for (int c = 0; c < 3; ++c) px[c] = blend(px[c], a.saturation, y);
    } else if (channels == 3 && part == kJitterHue) {
      rotate_hue(px, a.hue);
    }
  }
}

// The blur's radius for a patch side: 3 sigma, within the patch.
SACCADE_HD int blur_radius(float sigma, int patch_size) {
  if (!(sigma > 0)) return 0;
  const int r = static_cast<int>(ceilf(3 * sigma));
  return r < patch_size - 1 ? r : patch_size - 1;
}

// Normalised Gaussian taps w[0 .. 2r], r = blur_radius.
SACCADE_HD void blur_taps(float sigma, int radius, float* w) {
  float total = 0;
  for (int i = -radius; i <= radius; ++i)
    total += w[i + radius] = expf(-0.5f * static_cast<float>(i * i) / (sigma * sigma));
  for (int i = 0; i <= 2 * radius; ++i) w[i] /= total;
}

// One output of a blur pass along a line of `n` values `stride` apart, borders replicated.
SACCADE_HD float blur_at(const float* line, int stride, int n, int at, const float* w, int radius) {
  float acc = 0;
  for (int i = -radius; i <= radius; ++i) {
    int j = at + i;
    j = j < 0 ? 0 : j > n - 1 ? n - 1 : j;
    acc += w[i + radius] * line[j * stride];
  }
  return acc;
}

// The last maps of a value: solarisation, then the normalisation of its channel.
SACCADE_HD float finish(float v, const PatchAugment& a, const Normalisation& norm, int c) {
  if (a.solarize != 0 && v >= 128) v = 255 - v;
  return v * norm.scale[c] - norm.shift[c];
}

}  // namespace saccade::kernels::photometric
