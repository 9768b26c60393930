#include "dataloader/augment.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

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
float clamp255(float x) {
  return std::min(255.0f, std::max(0.0f, x));
}

// Calls f(r, g, b) with references to the three channels of every pixel.
template <class F>
void for_each_rgb(const ViewPixels& v, F&& f) {
  const int64_t plane = int64_t{v.patch_size} * v.patch_size;
  for (int64_t t = 0; t < v.tokens; ++t) {
    float* r = v.patches + t * 3 * plane;
    float* g = r + plane;
    float* b = g + plane;
    for (int64_t i = 0; i < plane; ++i) f(r[i], g[i], b[i]);
  }
}

float gray_of(float r, float g, float b) {
  return 0.299f * r + 0.587f * g + 0.114f * b;
}

void brightness(const ViewPixels& v, float f) {
  const int64_t n = v.tokens * v.channels * v.patch_size * v.patch_size;
  for (int64_t i = 0; i < n; ++i) v.patches[i] = clamp255(v.patches[i] * f);
}

void contrast(const ViewPixels& v, float f) {
  const int64_t plane = int64_t{v.patch_size} * v.patch_size;
  double sum = 0;
  if (v.channels == 3) {
    for_each_rgb(v, [&](float& r, float& g, float& b) { sum += gray_of(r, g, b); });
  } else {
    for (int64_t i = 0; i < v.tokens * plane; ++i) sum += v.patches[i];
  }
  const float mean = static_cast<float>(sum / static_cast<double>(v.tokens * plane));
  const int64_t n = v.tokens * v.channels * plane;
  for (int64_t i = 0; i < n; ++i) v.patches[i] = clamp255(f * v.patches[i] + (1 - f) * mean);
}

void saturation(const ViewPixels& v, float f) {
  for_each_rgb(v, [&](float& r, float& g, float& b) {
    const float y = gray_of(r, g, b);
    r = clamp255(f * r + (1 - f) * y);
    g = clamp255(f * g + (1 - f) * y);
    b = clamp255(f * b + (1 - f) * y);
  });
}

// Rotates the hue by `shift` turns (torchvision's adjust_hue: RGB -> HSV -> RGB).
void hue(const ViewPixels& v, float shift) {
  for_each_rgb(v, [&](float& r, float& g, float& b) {
    const float mx = std::max({r, g, b}), mn = std::min({r, g, b});
    const float chroma = mx - mn;
    if (chroma <= 0) return;
    float h;
    if (mx == r) {
      h = (g - b) / chroma;
    } else if (mx == g) {
      h = 2 + (b - r) / chroma;
    } else {
      h = 4 + (r - g) / chroma;
    }
    h = h / 6 + shift;
    h -= std::floor(h);
    const float s = chroma / mx, val = mx;
    const float hh = h * 6;
    const int sector = static_cast<int>(hh) % 6;
    const float frac = hh - std::floor(hh);
    const float p = val * (1 - s), q = val * (1 - s * frac), t = val * (1 - s * (1 - frac));
    const std::array<std::array<float, 3>, 6> rgb = {
        {{val, t, p}, {q, val, p}, {p, val, t}, {p, q, val}, {t, p, val}, {val, p, q}}};
    r = rgb[sector][0];
    g = rgb[sector][1];
    b = rgb[sector][2];
  });
}

void grayscale(const ViewPixels& v) {
  for_each_rgb(v, [](float& r, float& g, float& b) { r = g = b = gray_of(r, g, b); });
}

void blur(const ViewPixels& v, float sigma) {
  const int p = v.patch_size;
  const int radius = std::min(p - 1, static_cast<int>(std::ceil(3 * sigma)));
  if (radius <= 0) return;
  std::vector<float> kernel(2 * radius + 1);
  float total = 0;
  for (int i = -radius; i <= radius; ++i)
    total += kernel[i + radius] = std::exp(-0.5f * i * i / (sigma * sigma));
  for (float& k : kernel) k /= total;
  std::vector<float> tmp(static_cast<size_t>(p) * p);
  const int64_t planes = v.tokens * v.channels;
  for (int64_t plane = 0; plane < planes; ++plane) {
    float* x = v.patches + plane * p * p;
    for (int y = 0; y < p; ++y) {  // rows, replicated borders
      for (int c = 0; c < p; ++c) {
        float acc = 0;
        for (int i = -radius; i <= radius; ++i)
          acc += kernel[i + radius] * x[y * p + std::clamp(c + i, 0, p - 1)];
        tmp[y * p + c] = acc;
      }
    }
    for (int y = 0; y < p; ++y) {  // columns
      for (int c = 0; c < p; ++c) {
        float acc = 0;
        for (int i = -radius; i <= radius; ++i)
          acc += kernel[i + radius] * tmp[std::clamp(y + i, 0, p - 1) * p + c];
        x[y * p + c] = acc;
      }
    }
  }
}

void solarize(const ViewPixels& v) {
  const int64_t n = v.tokens * v.channels * v.patch_size * v.patch_size;
  for (int64_t i = 0; i < n; ++i) {
    if (v.patches[i] >= 128.0f) v.patches[i] = 255.0f - v.patches[i];
  }
}

}  // namespace

void augment_photometric(const ViewPixels& v, const PhotometricSpec& spec, std::mt19937_64& rng) {
  if (chance(rng, spec.jitter_p)) {
    std::array<int, 4> order = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i)
      std::swap(order[i], order[static_cast<int>(uniform01(rng) * (i + 1))]);
    for (int part : order) {
      switch (part) {
        case 0:
          brightness(v, uniform(rng, 0.6f, 1.4f));
          break;
        case 1:
          contrast(v, uniform(rng, 0.6f, 1.4f));
          break;
        case 2:
          if (v.channels == 3) saturation(v, uniform(rng, 0.8f, 1.2f));
          break;
        case 3:
          if (v.channels == 3) hue(v, uniform(rng, -0.1f, 0.1f));
          break;
      }
    }
  }
  if (v.channels == 3 && chance(rng, spec.grayscale_p)) grayscale(v);
  if (chance(rng, spec.blur_p))
    blur(v, uniform(rng, 0.1f, 2.0f) * static_cast<float>(v.patch_size) / 14.0f);
  if (chance(rng, spec.solarize_p)) solarize(v);
}

void flip_horizontal(const ViewPixels& v, float* positions, float extent_x) {
  const int p = v.patch_size;
  const int64_t rows = v.tokens * v.channels * p;
  for (int64_t row = 0; row < rows; ++row)
    std::reverse(v.patches + row * p, v.patches + (row + 1) * p);
  for (int64_t t = 0; t < v.tokens; ++t) positions[3 * t] = extent_x - positions[3 * t];
}

void normalize(const ViewPixels& v, const float* mean, const float* std) {
  const int64_t plane = int64_t{v.patch_size} * v.patch_size;
  for (int64_t t = 0; t < v.tokens; ++t) {
    for (int c = 0; c < v.channels; ++c) {
      const float scale = 1.0f / (255.0f * std[c]), shift = mean[c] / std[c];
      float* x = v.patches + (t * v.channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) x[i] = x[i] * scale - shift;
    }
  }
}

}  // namespace saccade::data
