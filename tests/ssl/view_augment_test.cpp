#include "workers/ssl/view_augment.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>
#include <vector>

#include "dataloader/augment.h"
#include "tests/support/reference_augment.h"

namespace saccade::ssl {
namespace {

using data::ViewAugment;

constexpr int kP = 8;

torch::Tensor random_pixels(int64_t n, int64_t t, int64_t c, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {n, t, c, kP, kP}, torch::kByte);
}

std::vector<float> encoded(const std::vector<ViewAugment>& augments) {
  std::vector<float> rows(augments.size() * data::kViewAugmentFloats);
  for (size_t i = 0; i < augments.size(); ++i)
    data::encode_view_augment(augments[i], rows.data() + i * data::kViewAugmentFloats);
  return rows;
}

// The reference: each view's rows gathered into one buffer, augmented and normalised
// pixel by pixel, scattered back to the step-major rows.
torch::Tensor reference(const torch::Tensor& pixels, const std::vector<ViewAugment>& augments,
                        int64_t pieces, const std::vector<float>& mean,
                        const std::vector<float>& stdev) {
  const int64_t n = pixels.size(0), t = pixels.size(1), c = pixels.size(2);
  const int64_t views = n / pieces;
  torch::Tensor out = pixels.to(torch::kFloat).clone();
  for (int64_t a = 0; a < views; ++a) {
    torch::Tensor view = out.view({pieces, views, t, c, kP, kP}).select(1, a).contiguous();
    testing::reference_augment(view.data_ptr<float>(), pieces * t, static_cast<int>(c), kP,
                               augments[static_cast<size_t>(a)]);
    testing::reference_normalise(view.data_ptr<float>(), pieces * t, static_cast<int>(c), kP, mean,
                                 stdev);
    out.view({pieces, views, t, c, kP, kP}).select(1, a).copy_(view);
  }
  return out;
}

const std::vector<float> kMean3 = {0.485f, 0.456f, 0.406f}, kStd3 = {0.229f, 0.224f, 0.225f};

TEST(ViewAugment, IdentityIsThePlainNormalisation) {
  const torch::Tensor pixels = random_pixels(6, 5, 3, 1);
  const std::vector<ViewAugment> none(6);
  const torch::Tensor got = augment_views(pixels, encoded(none).data(), 1, kMean3, kStd3);
  ASSERT_EQ(got.scalar_type(), torch::kFloat);
  ASSERT_EQ(got.sizes(), pixels.sizes());
  EXPECT_TRUE(torch::allclose(got, reference(pixels, none, 1, kMean3, kStd3), 0, 1e-6));
}

// Every part of DINOv2's augmentation, drawn as the data plane draws it, on RGB and grey
// views, single-row views and 3-glimpse sequences (contrast takes the mean of the whole
// sequence): the device agrees with the pixel-by-pixel reference. Sums run in another order
// (contrast's mean, blur), so a value may differ by float rounding, and the rare value that
// rounding carries across solarisation's threshold (128) by up to 255: at most 1e-4 of them.
TEST(ViewAugment, DrawnAugmentationsMatchTheReference) {
  std::mt19937_64 rng(11);
  for (const int64_t channels : {3, 1}) {
    for (const int64_t pieces : {1, 3}) {
      const int64_t views = 40;
      const torch::Tensor pixels = random_pixels(pieces * views, 7, channels, 2 + pieces);
      std::vector<ViewAugment> augments;
      for (int64_t a = 0; a < views; ++a)
        augments.push_back(
            data::draw_view_augment({0.8f, 0.3f, 0.5f, 0.3f}, static_cast<int>(channels), kP, rng));
      const std::vector<float> mean(channels, 0.45f), stdev(channels, 0.226f);
      const torch::Tensor got =
          augment_views(pixels, encoded(augments).data(), pieces, mean, stdev);
      const torch::Tensor want = reference(pixels, augments, pieces, mean, stdev);
      const float tolerance = 0.01f / (255 * 0.226f);  // a hundredth of a grey level
      const torch::Tensor off = (got - want).abs() > tolerance;
      EXPECT_LE(off.sum().item<int64_t>(), got.numel() / 10000)
          << "channels " << channels << " pieces " << pieces << " max error "
          << (got - want).abs().max().item<float>();
    }
  }
}

// Each map alone, against its definition (not only against the reference).
TEST(ViewAugment, GrayscaleSolariseFlipAndBlurDoWhatTheySay) {
  const std::vector<float> mean(3, 0.0f), unit(3, 1.0f / 255);  // normalised value = pixel value
  const torch::Tensor pixels = random_pixels(1, 2, 3, 5);
  const auto run = [&](const ViewAugment& a, const torch::Tensor& px, const std::vector<float>& m,
                       const std::vector<float>& s) {
    return augment_views(px, encoded({a}).data(), 1, m, s);
  };
  ViewAugment gray;
  gray.grayscale = true;
  const torch::Tensor g = run(gray, pixels, mean, unit);
  EXPECT_TRUE(torch::allclose(g.select(2, 0), g.select(2, 1)));
  EXPECT_TRUE(torch::allclose(g.select(2, 0), g.select(2, 2)));
  const torch::Tensor p = pixels.to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(
      g.select(2, 0), 0.299f * p.select(2, 0) + 0.587f * p.select(2, 1) + 0.114f * p.select(2, 2),
      1e-5, 1e-3));

  ViewAugment flip;
  flip.flip = true;
  EXPECT_TRUE(torch::allclose(run(flip, pixels, mean, unit), p.flip({-1}), 0, 1e-4));

  const torch::Tensor levels = torch::tensor({0, 100, 127, 128, 200, 255}, torch::kByte)
                                   .view({6, 1, 1, 1, 1})
                                   .expand({6, 1, 1, kP, kP});
  ViewAugment solar;
  solar.solarize = true;
  std::vector<ViewAugment> six(6, solar);
  const torch::Tensor solarised =
      augment_views(levels.contiguous(), encoded(six).data(), 1, {0.0f}, {1.0f / 255});
  EXPECT_TRUE(torch::allclose(solarised.select(-1, 0).select(-1, 0).view({6}),
                              torch::tensor({0.0f, 100.0f, 127.0f, 127.0f, 55.0f, 0.0f}), 0, 1e-3));

  ViewAugment blur;
  blur.blur_sigma = 1.5f;
  const torch::Tensor flat = torch::full({1, 1, 1, kP, kP}, 77, torch::kByte);
  EXPECT_TRUE(torch::allclose(run(blur, flat, {0.0f}, {1.0f / 255}),
                              torch::full({1, 1, 1, kP, kP}, 77.0f), 0, 1e-3));
  torch::Tensor edge = torch::zeros({1, 1, 1, kP, kP}, torch::kByte);
  edge.narrow(-1, kP / 2, kP / 2).fill_(255);
  const torch::Tensor smooth = run(blur, edge, {0.0f}, {1.0f / 255}).view({kP, kP});
  EXPECT_GT(smooth[0][kP / 2 - 1].item<float>(), 0.0f);  // light leaks left of the edge
  EXPECT_LT(smooth[0][kP / 2].item<float>(), 255.0f);    // and dark to the right
  EXPECT_LT(smooth[0][kP / 2 - 1].item<float>(), smooth[0][kP / 2].item<float>());
}

// bf16 out: the float32 result rounded as LibTorch's conversion rounds it, bit for bit.
TEST(ViewAugment, Bf16OutIsTheFloatResultRoundedToNearestEven) {
  std::mt19937_64 rng(3);
  const torch::Tensor pixels = random_pixels(12, 5, 3, 9);
  std::vector<ViewAugment> augments;
  for (int a = 0; a < 12; ++a)
    augments.push_back(data::draw_view_augment({0.8f, 0.3f, 0.5f, 0.3f}, 3, kP, rng));
  const std::vector<float> rows = encoded(augments);
  const torch::Tensor f32 = augment_views(pixels, rows.data(), 1, kMean3, kStd3);
  const torch::Tensor b16 = augment_views(pixels, rows.data(), 1, kMean3, kStd3, torch::kBFloat16);
  ASSERT_EQ(b16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(b16, f32.to(torch::kBFloat16)));
  EXPECT_THROW(augment_views(pixels, rows.data(), 1, kMean3, kStd3, torch::kHalf),
               std::invalid_argument);
}

TEST(ViewAugment, ShapesThatDoNotFitAreRefused) {
  const std::vector<ViewAugment> two(2);
  const std::vector<float> rows = encoded(two);
  EXPECT_THROW(
      augment_views(torch::zeros({3, 1, 3, kP, kP}, torch::kByte), rows.data(), 2, kMean3, kStd3),
      std::invalid_argument);  // 3 rows are not views of 2 rows
  EXPECT_THROW(augment_views(torch::zeros({2, 1, 3, kP, kP}), rows.data(), 1, kMean3, kStd3),
               std::invalid_argument);  // float pixels
  EXPECT_THROW(
      augment_views(torch::zeros({2, 1, 3, kP, kP}, torch::kByte), rows.data(), 1, {0.5f}, {0.5f}),
      std::invalid_argument);  // one mean for three channels
}

}  // namespace
}  // namespace saccade::ssl
