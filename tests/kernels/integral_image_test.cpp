#include "kernels/integral_image.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/extract.h"
#include "test_images.h"

namespace saccade::kernels {
namespace {

using testing::brute_sum;
using testing::make_image;
using testing::TestImage;

// Every table entry equals the brute-force prefix sum (small images, all shapes).
TEST(IntegralImage, MatchesBruteForcePrefixSums) {
  const int shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {7, 13}, {33, 20}, {64, 300}};
  for (const auto& s : shapes)
    for (int c : {1, 3})
      for (int pad : {0, 5}) {
        const TestImage img = make_image(s[0], s[1], c, s[0] * 31 + s[1], 1, pad);
        const IntegralImage t = IntegralImage::build(img.view());
        ASSERT_EQ(t.height(), s[0]);
        ASSERT_EQ(t.width(), s[1]);
        ASSERT_EQ(t.channels(), c);
        for (int y = 0; y <= s[0]; ++y)
          for (int x = 0; x <= s[1]; ++x)
            for (int ch = 0; ch < c; ++ch)
              ASSERT_EQ(t.at(x, y, ch), brute_sum(img, 0, 0, x, y, ch))
                  << s[0] << "x" << s[1] << " c=" << c << " at " << x << "," << y;
      }
}

// Column strips built by several threads give the same table as one thread.
TEST(IntegralImage, MultithreadedBuildEqualsSingleThreaded) {
  const TestImage img = make_image(301, 1283, 3, 5, 1, 3);
  const IntegralImage one = IntegralImage::build(img.view(), 1);
  for (int threads : {2, 3, 7}) {
    const IntegralImage many = IntegralImage::build(img.view(), threads);
    for (int y = 0; y <= img.height; ++y)
      for (int x = 0; x <= img.width; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(one.at(x, y, c), many.at(x, y, c))
              << "threads=" << threads << " y=" << y << " x=" << x;
  }
}

// Rebuilding into a used table (smaller, then bigger) leaves no stale values.
TEST(IntegralImage, RebuildReusesStorageCorrectly) {
  IntegralImage t = IntegralImage::build(make_image(200, 200, 3, 1, 2).view());
  const TestImage small = make_image(10, 17, 1, 2, 1);
  t.rebuild(small.view());
  EXPECT_EQ(t.channels(), 1);
  EXPECT_EQ(t.at(17, 10, 0), brute_sum(small, 0, 0, 17, 10, 0));
  EXPECT_EQ(t.box_sum(3, 2, 9, 8, 0), brute_sum(small, 3, 2, 9, 8, 0));
}

// RGB corners are packed 5 per 64-byte line: no corner straddles two lines, and the
// 16-byte SSE load of a corner (3 channels + 1 ignored lane) stays within its line.
TEST(IntegralImage, PackedRgbCornersNeverStraddleALine) {
  EXPECT_EQ(column_of(0, 3), 0);
  EXPECT_EQ(column_of(4, 3), 12);
  EXPECT_EQ(column_of(5, 3), 16);
  EXPECT_EQ(column_of(7, 1), 7);
  for (int w : {1, 4, 5, 9, 17, 333}) {
    const TestImage img = make_image(3, w, 3, w, 1);
    const IntegralImage t = IntegralImage::build(img.view());
    EXPECT_EQ(t.row_stride() % kEntriesPerLine, 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.row(0)) % 64, 0u);
    EXPECT_LE(t.column(w) + 4, t.row_stride()) << "the last corner's 4th lane is in the row";
    for (int y = 0; y <= t.height(); ++y)
      for (int x = 0; x <= w; ++x) {
        const auto byte = reinterpret_cast<std::uintptr_t>(t.row(y) + t.column(x));
        ASSERT_LE(byte % 64, 48u) << "w=" << w << " x=" << x << " y=" << y;
        if (x > 0) {
          ASSERT_GE(t.column(x) - t.column(x - 1), 3);  // corners do not overlap
        }
      }
    // 16 lines of 5 corners per 15 lines of the unpacked layout: +1/15 memory.
    EXPECT_LE(t.row_stride(), ((w + 1) * 3 + 1 + 15) / 16 * 16 * 16 / 15 + 16);
  }
}

// Tables of >= 32 MiB are written with non-temporal stores, a line at a time, and strips
// (threads) share lines at their ends: every entry of such a table, RGB and gray, 1 and 3
// threads, is the prefix sum.
TEST(IntegralImage, StreamedLargeTableMatchesPrefixSums) {
  struct Shape {
    int h, w, c;
  };
  for (const Shape s : {Shape{1400, 2101, 3}, Shape{2800, 3003, 1}}) {
    const TestImage img = make_image(s.h, s.w, s.c, 23, 1, 5);
    for (int threads : {1, 3}) {
      const IntegralImage t = IntegralImage::build(img.view(), threads);
      ASSERT_GE(t.bytes(), std::size_t{32} << 20) << "the test needs a streamed table";
      std::vector<std::uint32_t> above((s.w + 1) * s.c, 0), here((s.w + 1) * s.c, 0);
      for (int y = 1; y <= s.h; ++y) {
        std::uint32_t run[3] = {};
        for (int x = 1; x <= s.w; ++x)
          for (int ch = 0; ch < s.c; ++ch) {
            run[ch] += img.at(y - 1, x - 1, ch);
            here[x * s.c + ch] = above[x * s.c + ch] + run[ch];
          }
        for (int x = 0; x <= s.w; ++x)
          for (int ch = 0; ch < s.c; ++ch)
            ASSERT_EQ(t.at(x, y, ch), here[x * s.c + ch])
                << "c=" << s.c << " threads=" << threads << " x=" << x << " y=" << y;
        std::swap(above, here);
      }
      for (int x = 0; x <= s.w; ++x) ASSERT_EQ(t.at(x, 0, 0), 0u) << "row 0, x=" << x;
    }
  }
}

// Box sums over random boxes match brute force on odd-width RGB images (widths 1..17
// cover every position of a corner in its line and partial last lines), gray too.
TEST(IntegralImage, RandomBoxSumsMatchBruteForceAcrossLineBoundaries) {
  std::mt19937_64 rng(17);
  for (int w = 1; w <= 17; ++w)
    for (int c : {3, 1}) {
      const int h = 1 + static_cast<int>(rng() % 13);
      const TestImage img = make_image(h, w, c, 100 + w, 1, w % 3);
      const IntegralImage t = IntegralImage::build(img.view(), 1 + w % 2);
      for (int i = 0; i < 200; ++i) {
        const int x0 = static_cast<int>(rng() % (w + 3)) - 1,
                  x1 = static_cast<int>(rng() % (w + 3)) - 1;
        const int y0 = static_cast<int>(rng() % (h + 3)) - 1,
                  y1 = static_cast<int>(rng() % (h + 3)) - 1;
        const int ch = static_cast<int>(rng() % c);
        ASSERT_EQ(t.box_sum(x0, y0, x1, y1, ch), brute_sum(img, x0, y0, x1, y1, ch))
            << "w=" << w << " c=" << c << " box " << x0 << "," << y0 << " " << x1 << "," << y1;
      }
    }
}

TEST(IntegralImage, BoxSumClipsToImage) {
  const TestImage img = make_image(40, 50, 3, 9, 1);
  const IntegralImage t = IntegralImage::build(img.view());
  EXPECT_EQ(t.box_sum(-10, -10, 60, 70, 1), brute_sum(img, 0, 0, 50, 40, 1));
  EXPECT_EQ(t.box_sum(45, 35, 90, 90, 2), brute_sum(img, 45, 35, 50, 40, 2));
  EXPECT_EQ(t.box_sum(60, 0, 70, 10, 0), 0u);
  EXPECT_EQ(t.box_sum(5, 5, 5, 9, 0), 0u);
  EXPECT_THROW(t.box_sum(0, 0, 1, 1, 3), std::invalid_argument);
}

// An 8192^2 photo-like RGB image: the uint32 table wraps (its far corner exceeds
// 2^32), yet box sums at the far corner, and whole-image sums, stay exact.
TEST(IntegralImage, LargePhotoStaysExactAtFarCorner) {
  constexpr int kSide = 8192;
  TestImage img{kSide, kSide, 3, kSide * 3, {}};
  img.pixels.resize(static_cast<std::size_t>(kSide) * kSide * 3);
  std::uint32_t s = 99;
  std::uint64_t total[3] = {0, 0, 0};
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x)
      for (int c = 0; c < 3; ++c) {
        s = s * 1664525u + 1013904223u;
        const int v = 60 + (x + y) * 120 / (2 * kSide) + c * 20 + static_cast<int>(s >> 27);
        img.pixels[(static_cast<std::size_t>(y) * kSide + x) * 3 + c] =
            static_cast<std::uint8_t>(v);
        total[c] += static_cast<std::uint8_t>(v);
      }
  const IntegralImage t = IntegralImage::build(img.view(), 0);
  for (int c = 0; c < 3; ++c) {
    ASSERT_GT(total[c], std::uint64_t{1} << 32) << "the test must overflow a uint32 table";
    EXPECT_EQ(t.box_sum(0, 0, kSide, kSide, c), total[c]);  // strips
  }
  // Far-corner box and the extraction of the bottom-right 512^2 crop.
  EXPECT_EQ(t.box_sum(kSide - 700, kSide - 300, kSide, kSide, 2),
            brute_sum(img, kSide - 700, kSide - 300, kSide, kSide, 2));
  constexpr int P = 16;
  std::vector<float> out(3 * P * P);
  const CropBox box{kSide - 512.f, kSide - 512.f, kSide, kSide, 0};
  extract_patches(std::span<const IntegralImage>(&t, 1), std::span<const CropBox>(&box, 1), P,
                  out.data());
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < P; ++r)
      for (int k = 0; k < P; ++k) {
        const long long x0 = kSide - 512 + k * 32, y0 = kSide - 512 + r * 32;
        const double want = brute_sum(img, x0, y0, x0 + 32, y0 + 32, c) / 1024.0;
        ASSERT_NEAR(out[(c * P + r) * P + k], want, want * 1e-6) << c << " " << r << " " << k;
      }
  // Whole-image patches: P = 4 cells (2048^2 px) take the fast path, P = 2 cells
  // (4096^2 px, sums > 2^31) the exact strip path; both must be exact.
  for (int p : {2, 4}) {
    const CropBox whole{0, 0, kSide, kSide, 0};
    std::vector<float> o(3 * p * p);
    extract_patches(std::span<const IntegralImage>(&t, 1), std::span<const CropBox>(&whole, 1), p,
                    o.data());
    const int cell = kSide / p;
    for (int c = 0; c < 3; ++c)
      for (int r = 0; r < p; ++r)
        for (int k = 0; k < p; ++k) {
          const double want = static_cast<double>(t.box_sum(k * cell, r * cell, (k + 1) * cell,
                                                            (r + 1) * cell, c)) /
                              (static_cast<double>(cell) * cell);
          ASSERT_NEAR(o[(c * p + r) * p + k], want, want * 1e-6) << "p=" << p;
        }
  }
  // Cross-check the strip sums used above against brute force on one quadrant.
  EXPECT_EQ(t.box_sum(kSide / 2, kSide / 2, kSide, kSide, 0),
            brute_sum(img, kSide / 2, kSide / 2, kSide, kSide, 0));
}

TEST(IntegralImage, BadInputNamesTheField) {
  std::vector<std::uint8_t> px(300, 1);
  auto message = [&](ImageView v) {
    try {
      IntegralImage::build(v);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message({px.data(), 0, 10, 3, 0}).find("image.height"), std::string::npos);
  EXPECT_NE(message({px.data(), 10, -1, 3, 0}).find("image.width"), std::string::npos);
  EXPECT_NE(message({px.data(), 10, 10, 2, 0}).find("image.channels"), std::string::npos);
  EXPECT_NE(message({px.data(), 10, 10, 4, 0}).find("image.channels"), std::string::npos);
  EXPECT_NE(message({nullptr, 10, 10, 3, 0}).find("image.data"), std::string::npos);
  EXPECT_NE(message({px.data(), 10, 10, 3, 20}).find("image.row_stride"), std::string::npos);
  EXPECT_NE(message({px.data(), 10, 70000, 1, 0}).find("image.width"), std::string::npos);
}

}  // namespace
}  // namespace saccade::kernels
