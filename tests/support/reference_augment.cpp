#include "tests/support/reference_augment.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace saccade::testing {
namespace {

struct View {
  float* patches;
  int64_t tokens;
  int channels;
  int patch_size;
  int64_t values() const { return tokens * channels * patch_size * patch_size; }
};

float clamp255(float x) {
  return std::min(255.0f, std::max(0.0f, x));
}

// Calls f(r, g, b) with references to the three channels of every pixel.
template <class F>
void for_each_rgb(const View& v, F&& f) {
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

void brightness(const View& v, float f) {
  for (int64_t i = 0; i < v.values(); ++i) v.patches[i] = clamp255(v.patches[i] * f);
}

void contrast(const View& v, float f) {
  const int64_t plane = int64_t{v.patch_size} * v.patch_size;
  double sum = 0;
  if (v.channels == 3) {
    for_each_rgb(v, [&](float& r, float& g, float& b) { sum += gray_of(r, g, b); });
  } else {
    for (int64_t i = 0; i < v.tokens * plane; ++i) sum += v.patches[i];
  }
  const float mean = static_cast<float>(sum / static_cast<double>(v.tokens * plane));
  for (int64_t i = 0; i < v.values(); ++i)
    v.patches[i] = clamp255(f * v.patches[i] + (1 - f) * mean);
}

void saturation(const View& v, float f) {
  for_each_rgb(v, [&](float& r, float& g, float& b) {
    const float y = gray_of(r, g, b);
    r = clamp255(f * r + (1 - f) * y);
    g = clamp255(f * g + (1 - f) * y);
    b = clamp255(f * b + (1 - f) * y);
  });
}

// Rotates the hue by `shift` turns (torchvision's adjust_hue: RGB -> HSV -> RGB).
void hue(const View& v, float shift) {
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

void grayscale(const View& v) {
  for_each_rgb(v, [](float& r, float& g, float& b) { r = g = b = gray_of(r, g, b); });
}

void blur(const View& v, float sigma) {
  const int p = v.patch_size;
  const int radius = std::min(p - 1, static_cast<int>(std::ceil(3 * sigma)));
  if (radius <= 0) return;
  std::vector<float> kernel(2 * radius + 1);
  float total = 0;
  for (int i = -radius; i <= radius; ++i)
    total += kernel[i + radius] = std::exp(-0.5f * i * i / (sigma * sigma));
  for (float& k : kernel) k /= total;
  std::vector<float> tmp(static_cast<size_t>(p) * p);
  for (int64_t plane = 0; plane < v.tokens * v.channels; ++plane) {
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

void solarize(const View& v) {
  for (int64_t i = 0; i < v.values(); ++i) {
    if (v.patches[i] >= 128.0f) v.patches[i] = 255.0f - v.patches[i];
  }
}

}  // namespace

void reference_augment(float* patches, int64_t tokens, int channels, int patch_size,
                       const data::ViewAugment& a) {
  const View v{patches, tokens, channels, patch_size};
  if (a.jitter) {
    for (uint8_t part : a.order) {
      if (part == data::kBrightness) brightness(v, a.brightness);
      if (part == data::kContrast) contrast(v, a.contrast);
      if (part == data::kSaturation && channels == 3) saturation(v, a.saturation);
      if (part == data::kHue && channels == 3) hue(v, a.hue);
    }
  }
  if (a.grayscale && channels == 3) grayscale(v);
  if (a.blur_sigma > 0) blur(v, a.blur_sigma);
  if (a.solarize) solarize(v);
  if (a.flip) {
    const int p = patch_size;
    for (int64_t row = 0; row < tokens * channels * p; ++row)
      std::reverse(patches + row * p, patches + (row + 1) * p);
  }
}

void reference_normalise(float* patches, int64_t tokens, int channels, int patch_size,
                         const std::vector<float>& mean, const std::vector<float>& stdev) {
  const int64_t plane = int64_t{patch_size} * patch_size;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const float scale = 1.0f / (255.0f * stdev[c]), shift = mean[c] / stdev[c];
      float* x = patches + (t * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) x[i] = x[i] * scale - shift;
    }
  }
}

}  // namespace saccade::testing
