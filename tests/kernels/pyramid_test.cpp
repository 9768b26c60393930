// The image-pyramid peer (kernels/pyramid.h): level geometry, half-pixel alignment
// at every level, zero outside, and clear errors.
#include "kernels/pyramid.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/extract.h"
#include "tests/kernels/test_images.h"

namespace saccade::kernels {
namespace {

using testing::make_image;
using testing::TestImage;

// A gray ramp along x (pixel value = column, or row when `along_y`).
TestImage ramp(int side, bool along_y) {
  TestImage img{side, side, 1, side, std::vector<std::uint8_t>(side * side)};
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x)
      img.pixels[y * side + x] = static_cast<std::uint8_t>(along_y ? y : x);
  return img;
}

std::vector<float> patches(const ImagePyramid& pyramid, const std::vector<CropBox>& boxes, int p) {
  std::vector<float> out(boxes.size() * pyramid.channels() * p * p, -1.0f);
  pyramid_patches(std::span<const ImagePyramid>(&pyramid, 1), boxes, p, out.data(), 2);
  return out;
}

TEST(Pyramid, LevelsHalveDownToTheMinimumSide) {
  const TestImage img = make_image(100, 256, 3, 1, 0, /*pad=*/5);
  const ImagePyramid pyramid = ImagePyramid::build(img.view());
  ASSERT_EQ(pyramid.levels(), 8);                       // short side 100, 50, 25, 13, 7, 4, 2, 1
  EXPECT_EQ(pyramid.level(0).data, img.pixels.data());  // level 0 is not copied
  for (int l = 1; l < pyramid.levels(); ++l) {
    EXPECT_EQ(pyramid.level(l).height, (pyramid.level(l - 1).height + 1) / 2) << "level " << l;
    EXPECT_EQ(pyramid.level(l).width, (pyramid.level(l - 1).width + 1) / 2) << "level " << l;
  }
  EXPECT_EQ(pyramid.level(pyramid.levels() - 1).height, 1);
  EXPECT_EQ(ImagePyramid::build(img.view(), 16).levels(), 4);  // 100, 50, 25, 13
  EXPECT_EQ(pyramid.level_for(1.0), 0);
  EXPECT_EQ(pyramid.level_for(2.9), 2);   // log2 1.54 rounds to 2
  EXPECT_EQ(pyramid.level_for(1e6), 7);   // clamped to the last level
  EXPECT_EQ(pyramid.level_for(0.01), 0);  // upsampling reads level 0
}

// rebuild() gives exactly the levels a fresh build gives, for a bigger, a smaller and a
// same-size image in turn, and reuses each level's storage while the size stays.
TEST(Pyramid, RebuildEqualsAFreshBuildAndReusesStorage) {
  const TestImage a = make_image(100, 256, 3, 1), b = make_image(300, 200, 3, 2, 0, 3),
                  c = make_image(300, 200, 3, 3), gray = make_image(64, 80, 1, 4);
  ImagePyramid pyramid = ImagePyramid::build(a.view());
  for (const TestImage* img : {&b, &gray, &b, &c}) {
    const std::uint8_t* level1 = pyramid.level(1).data;
    const bool same_size = pyramid.level(0).height == img->height &&
                           pyramid.level(0).width == img->width &&
                           pyramid.channels() == img->channels;
    pyramid.rebuild(img->view());
    const ImagePyramid fresh = ImagePyramid::build(img->view());
    ASSERT_EQ(pyramid.levels(), fresh.levels());
    ASSERT_EQ(pyramid.channels(), img->channels);
    EXPECT_EQ(pyramid.level(0).data, img->pixels.data());
    if (same_size) {
      EXPECT_EQ(pyramid.level(1).data, level1) << "storage not reused";
    }
    for (int l = 1; l < pyramid.levels(); ++l) {
      const ImageView x = pyramid.level(l), y = fresh.level(l);
      ASSERT_EQ(x.height, y.height);
      ASSERT_EQ(x.width, y.width);
      for (int r = 0; r < x.height; ++r)
        ASSERT_EQ(0, std::memcmp(x.data + r * x.row_stride, y.data + r * y.row_stride,
                                 static_cast<std::size_t>(x.width) * x.channels))
            << "level " << l << " row " << r;
    }
  }
}

// On a ramp, the box average of a cell is its centre's value (pixel k holds k, centred
// at k + 0.5), and a Gaussian level of a ramp is the same ramp: so away from the
// borders the pyramid must equal the exact box average at every level. A half-pixel
// misalignment of any level shows up here as an error of 2^(l-1).
TEST(Pyramid, SamplesAreCentredAtEveryLevel) {
  for (const bool along_y : {false, true}) {
    const TestImage img = ramp(256, along_y);
    const ImagePyramid pyramid = ImagePyramid::build(img.view());
    IntegralImage table = IntegralImage::build(img.view());
    for (const int cell : {1, 2, 4, 8}) {  // levels 0..3
      const int p = 8;
      const float side = static_cast<float>(cell * p);
      const std::vector<CropBox> boxes = {
          {128 - side / 2, 120 - side / 2, 128 + side / 2, 120 + side / 2, 0},
          {101, 90, 101 + side, 90 + side, 0}};
      ASSERT_EQ(pyramid.level_for(cell), static_cast<int>(std::log2(cell)));
      const std::vector<float> got = patches(pyramid, boxes, p);
      std::vector<float> exact(got.size());
      extract_patches(std::span<const IntegralImage>(&table, 1), boxes, p, exact.data());
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], exact[i], 1e-3) << "cell " << cell << " value " << i
                                            << (along_y ? " (ramp along y)" : " (ramp along x)");
    }
  }
}

TEST(Pyramid, ConstantImageStaysConstantInsideAndZeroOutside) {
  const TestImage img = make_image(64, 96, 3, 2, /*mode=all 255*/ 2, /*pad=*/3);
  const ImagePyramid pyramid = ImagePyramid::build(img.view());
  const int p = 4;
  const std::vector<CropBox> inside = {
      {10, 10, 14, 14, 0}, {8, 8, 40, 40, 0}, {20.5f, 3.25f, 60, 50, 0}};
  for (const float v : patches(pyramid, inside, p)) ASSERT_NEAR(v, 255.0f, 1e-3);
  const std::vector<CropBox> outside = {{-40, -40, -8, -8, 0}, {100, 0, 132, 32, 0}};
  for (const float v : patches(pyramid, outside, p)) ASSERT_EQ(v, 0.0f);
  // Half out: the cells beyond the image read zero, those well inside read 255.
  const std::vector<float> half = patches(pyramid, {{-8, 20, 8, 36, 0}}, p);  // 4-pixel cells
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(half[(c * p + r) * p + 0], 0.0f);            // centre x = -6
      EXPECT_NEAR(half[(c * p + r) * p + 3], 255.0f, 1e-3);  // centre x = 6
    }
}

TEST(Pyramid, ApproximatesTheBoxAverageOnSmoothImages) {
  const TestImage img = make_image(300, 400, 3, 3, /*smooth waves*/ 3);
  const ImagePyramid pyramid = ImagePyramid::build(img.view());
  IntegralImage table = IntegralImage::build(img.view());
  std::vector<CropBox> boxes;
  for (int i = 0; i < 20; ++i) {
    const float side = 16.0f + 8.0f * static_cast<float>(i);  // all inside the image
    boxes.push_back(
        {30.0f + 3.1f * i, 20.0f + 2.3f * i, 30.0f + 3.1f * i + side, 20.0f + 2.3f * i + side, 0});
  }
  const int p = 16;
  const std::vector<float> got = patches(pyramid, boxes, p);
  std::vector<float> exact(got.size());
  extract_patches(std::span<const IntegralImage>(&table, 1), boxes, p, exact.data());
  double sum = 0;
  for (std::size_t i = 0; i < got.size(); ++i) sum += std::abs(got[i] - exact[i]);
  const double mean = sum / static_cast<double>(got.size());
  // Close, not exact: a Gaussian level is not a box filter (measured 8.0 here, on
  // waves of amplitude 100 and period ~45 pixels, where a 4.6-pixel Gaussian and an
  // 11-pixel box attenuate differently).
  EXPECT_LT(mean, 12.0);
  EXPECT_GT(mean, 1e-3);  // and not secretly the box average
}

TEST(Pyramid, RefusesBadInputWithTheFieldName) {
  const TestImage rgb = make_image(32, 32, 3, 4);
  const TestImage gray = make_image(32, 32, 1, 4);
  EXPECT_THROW(ImagePyramid::build(rgb.view(), 0), std::invalid_argument);
  std::vector<ImagePyramid> mixed;
  mixed.push_back(ImagePyramid::build(rgb.view()));
  mixed.push_back(ImagePyramid::build(gray.view()));
  std::vector<float> out(3 * 4 * 4);
  const CropBox ok{0, 0, 8, 8, 0};
  try {
    pyramid_patches(mixed, std::span<const CropBox>(&ok, 1), 4, out.data());
    FAIL() << "mixed channel counts were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pyramids[1].channels"), std::string::npos) << e.what();
  }
  const CropBox empty{5, 0, 5, 8, 0};
  try {
    pyramid_patches(std::span<const ImagePyramid>(mixed.data(), 1),
                    std::span<const CropBox>(&empty, 1), 4, out.data());
    FAIL() << "an empty box was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("x1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace saccade::kernels
