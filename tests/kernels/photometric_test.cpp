// The fused photometric augmentation's CPU loop at the kernels' level: a layout that does not
// fit is refused by field, no augmentation is the plain normalisation, a flip mirrors each
// patch, and each view's contrast blends with the mean of that view alone. (Every map against
// a pixel-by-pixel reference: ctest -R ViewAugment.)
#include "kernels/photometric.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/extract.h"

namespace saccade::kernels {
namespace {

std::vector<std::uint8_t> noise(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<std::uint8_t>(rng() & 255);
  return v;
}

std::string error_of(const PatchLayout& l) {
  try {
    validate_patch_layout(l);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(Photometric, LayoutsThatDoNotFitAreRefusedByField) {
  PatchLayout l{2, 1, 3, 3, 8};
  EXPECT_EQ(error_of(l), "no exception");
  l.channels = 2;
  EXPECT_NE(error_of(l).find("channels"), std::string::npos);
  l = {2, 1, 3, 3, 129};
  EXPECT_NE(error_of(l).find("patch_size"), std::string::npos);
  l = {2, 0, 3, 3, 8};
  EXPECT_NE(error_of(l).find("pieces"), std::string::npos);
  if (!cuda_backend_compiled()) {
    EXPECT_THROW(
        augment_patches_cuda(nullptr, nullptr, FloatType::kFloat32, PatchLayout{1, 1, 1, 1, 4},
                             nullptr, Normalisation{}, nullptr, nullptr),
        std::runtime_error);
  }
}

TEST(Photometric, NoAugmentationIsTheNormalisationAndAFlipMirrorsEachPatch) {
  const PatchLayout l{3, 2, 4, 3, 5};  // 6 rows of 4 RGB patches of 5 x 5
  const std::vector<std::uint8_t> in = noise(l.values(), 1);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};
  const Normalisation norm = normalisation(mean, stdev, 3);
  std::vector<PatchAugment> views(3);
  std::vector<float> out(static_cast<size_t>(l.values()));
  augment_patches(in.data(), out.data(), FloatType::kFloat32, l, views.data(), norm, 2);
  const std::int64_t plane = 25;
  for (std::int64_t i = 0; i < l.values(); ++i) {
    const int c = static_cast<int>((i / plane) % 3);
    ASSERT_EQ(out[i], in[i] * norm.scale[c] - norm.shift[c]) << i;
  }
  views[1].flip = 1;  // rows 1 and 4
  augment_patches(in.data(), out.data(), FloatType::kFloat32, l, views.data(), norm, 2);
  for (std::int64_t i = 0; i < l.values(); ++i) {
    const std::int64_t row = i / (4 * 3 * plane), k = i % 5;
    const std::int64_t from = row % 3 == 1 ? i - k + (4 - k) : i;
    const int c = static_cast<int>((i / plane) % 3);
    ASSERT_EQ(out[i], in[from] * norm.scale[c] - norm.shift[c]) << i;
  }
}

// Contrast alone, factor 0: every value becomes its view's mean grey level, a view being
// its rows r, r + views, ... (the pieces of one sequence), and no other.
TEST(Photometric, ContrastBlendsWithTheMeanOfItsOwnView) {
  const PatchLayout l{2, 3, 2, 1, 4};
  std::vector<std::uint8_t> in(static_cast<size_t>(l.values()));
  for (std::int64_t i = 0; i < l.values(); ++i) {
    const std::int64_t row = i / (2 * 16);
    in[static_cast<size_t>(i)] = static_cast<std::uint8_t>(row % 2 == 0 ? 10 * (row + 1) : 200);
  }
  std::vector<PatchAugment> views(2);
  for (PatchAugment& a : views) {
    a.jitter = 1;
    a.order[0] = kJitterContrast;
    a.order[1] = kJitterBrightness;
    a.contrast = 0;
  }
  const float unit[1] = {1.0f / 255}, zero[1] = {0};
  std::vector<float> out(static_cast<size_t>(l.values()));
  augment_patches(in.data(), out.data(), FloatType::kFloat32, l, views.data(),
                  normalisation(zero, unit, 1), 1);
  // View 0: rows 0, 2, 4 at 10, 30, 50 -> 30; view 1: rows 1, 3, 5 all 200.
  for (std::int64_t i = 0; i < l.values(); ++i) {
    const std::int64_t row = i / (2 * 16);
    ASSERT_NEAR(out[i], row % 2 == 0 ? 30.0f : 200.0f, 1e-3) << "row " << row;
  }
}

}  // namespace
}  // namespace saccade::kernels
