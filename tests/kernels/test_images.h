// Test images and brute-force references for the kernels tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/integral_image.h"

namespace saccade::kernels::testing {

// An owned HWC image with an optional row padding (to exercise row_stride).
struct TestImage {
  int height = 0, width = 0, channels = 0;
  std::ptrdiff_t stride = 0;
  std::vector<std::uint8_t> pixels;
  ImageView view() const { return {pixels.data(), height, width, channels, stride}; }
  std::uint8_t at(int y, int x, int c) const { return pixels[y * stride + x * channels + c]; }
};

// Photo-like: a gradient plus noise (mode 0), pure noise (1), all 255 (2), or smooth
// waves with a little noise (3).
inline TestImage make_image(int h, int w, int c, std::uint64_t seed, int mode = 0, int pad = 0) {
  TestImage img{h, w, c, static_cast<std::ptrdiff_t>(w) * c + pad, {}};
  img.pixels.assign(static_cast<std::size_t>(img.stride) * h, 7);  // padding bytes = 7
  std::mt19937_64 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        int v = 255;
        if (mode == 0) {
          v = static_cast<int>((x * 97 + y * 61 + ch * 50) * 150.0 / (w * 97 + h * 61 + 1)) +
              static_cast<int>(rng() % 100);
        } else if (mode == 1) {
          v = static_cast<int>(rng() & 255);
        } else if (mode == 3) {
          v = static_cast<int>(128 + 100 * std::sin(x / 7.0 + ch) * std::cos(y / 9.0)) +
              static_cast<int>(rng() % 4);
        }
        img.pixels[y * img.stride + x * c + ch] = static_cast<std::uint8_t>(v > 255 ? 255 : v);
      }
  return img;
}

// Sum of channel c over the integer box [x0, x1) x [y0, y1); outside pixels are zero.
inline std::uint64_t brute_sum(const TestImage& img, long long x0, long long y0, long long x1,
                               long long y1, int c) {
  std::uint64_t s = 0;
  for (long long y = y0 < 0 ? 0 : y0; y < y1 && y < img.height; ++y)
    for (long long x = x0 < 0 ? 0 : x0; x < x1 && x < img.width; ++x)
      s += img.at(static_cast<int>(y), static_cast<int>(x), c);
  return s;
}

}  // namespace saccade::kernels::testing
