#include "kernels/geometry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace saccade::kernels {
namespace {

TEST(Geometry, FovealGridCentresFollowThePaperFormula) {
  for (int g : {1, 4, 7, 9, 16})
    for (float z : {0.0f, 2.5f, 5.0f}) {
      const Gaze gaze{0.37f, 0.81f};
      const auto grid = foveal_grid(gaze, z, g);
      ASSERT_EQ(grid.size(), static_cast<std::size_t>(g * g));
      const double s = std::pow(2.0, -z);
      for (int v = 0; v < g; ++v)
        for (int u = 0; u < g; ++u) {
          const PatchXYZ& p = grid[v * g + u];
          EXPECT_NEAR(p.x, 0.37 + (u - (g - 1) / 2.0) * s, 1e-6);
          EXPECT_NEAR(p.y, 0.81 + (v - (g - 1) / 2.0) * s, 1e-6);
          EXPECT_EQ(p.z, z);
        }
      // Neighbours touch: centres one patch side apart; the grid is centred on the gaze.
      if (g > 1) {
        EXPECT_NEAR(grid[1].x - grid[0].x, s, 1e-6);
      }
      double mx = 0, my = 0;
      for (const auto& p : grid) mx += p.x, my += p.y;
      EXPECT_NEAR(mx / grid.size(), 0.37, 1e-5);
      EXPECT_NEAR(my / grid.size(), 0.81, 1e-5);
    }
}

TEST(Geometry, MultizoomIsConcentricWithLinspaceZooms) {
  const auto mz = multizoom_patches({0.3f, 0.6f}, 6);
  ASSERT_EQ(mz.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(mz[i].x, 0.3f);
    EXPECT_EQ(mz[i].y, 0.6f);
    EXPECT_NEAR(mz[i].z, i * 1.0, 1e-6);  // linspace(0, 5, 6)
  }
  EXPECT_EQ(multizoom_patches({0.5f, 0.5f}, 1)[0].z, 0.0f);
}

TEST(Geometry, ZoomForScaleCoversTheScale) {
  for (int g : {7, 12, 16})
    for (float s : {0.05f, 0.32f, 1.0f}) {
      const double side = g * std::pow(2.0, -zoom_for_scale(g, s));
      EXPECT_NEAR(side * side, s, 1e-6);
    }
  EXPECT_NEAR(zoom_for_scale(16, 1.0f), 4.0, 1e-6);  // ViT mode: log2(16)
}

void check_view(const GridView& v, ImageSize size, int g, float lo, float hi) {
  const Gaze ext = image_extent(size);
  ASSERT_EQ(v.grid, g);
  ASSERT_EQ(v.patches.size(), static_cast<std::size_t>(g * g));
  EXPECT_GE(v.scale, lo);
  EXPECT_LE(v.scale, hi);
  EXPECT_NEAR(v.zoom, std::log2(g) - std::log2(v.scale) / 2, 1e-5);
  const double half = std::pow(2.0, -v.zoom) / 2;
  for (const auto& p : v.patches) {  // the whole grid stays inside the image
    EXPECT_GE(p.x - half, -1e-5);
    EXPECT_LE(p.x + half, ext.x + 1e-5);
    EXPECT_GE(p.y - half, -1e-5);
    EXPECT_LE(p.y + half, ext.y + 1e-5);
    EXPECT_EQ(p.z, v.zoom);
  }
}

TEST(Geometry, GlobalAndLocalViewsStayInTheirScaleRanges) {
  std::mt19937_64 rng(3);
  for (ImageSize size : {ImageSize{224, 224}, ImageSize{480, 1920}, ImageSize{4000, 3000}}) {
    float gmin = 2, gmax = 0, lmin = 2, lmax = 0;
    for (int i = 0; i < 2000; ++i) {
      const GridView gv = global_view(size, rng);
      const GridView lv = local_view(size, rng);
      check_view(gv, size, 16, 0.32f, 1.0f);
      check_view(lv, size, 7, 0.05f, 0.32f);
      gmin = std::min(gmin, gv.scale), gmax = std::max(gmax, gv.scale);
      lmin = std::min(lmin, lv.scale), lmax = std::max(lmax, lv.scale);
    }
    // The samples span the ranges (not a constant).
    EXPECT_LT(gmin, 0.35f);
    EXPECT_GT(gmax, 0.97f);
    EXPECT_LT(lmin, 0.06f);
    EXPECT_GT(lmax, 0.31f);
  }
}

TEST(Geometry, TokenCountIndependentOfImageSize) {
  std::mt19937_64 rng(1);
  for (ImageSize size :
       {ImageSize{32, 32}, ImageSize{256, 256}, ImageSize{8192, 8192}, ImageSize{300, 5000}}) {
    EXPECT_EQ(global_view(size, rng).patches.size(), 256u);
    EXPECT_EQ(local_view(size, rng).patches.size(), 49u);
    EXPECT_EQ(vit_full_grid(size).patches.size(), 256u);
    const Gaze g = sample_gaze(size, rng);
    EXPECT_EQ(multizoom_patches(g, 19).size() + foveal_grid(g, 5, 9).size(), 100u);
  }
}

TEST(Geometry, NonSquareImagesUseTheShortSideAsUnit) {
  const ImageSize wide{300, 600};  // H x W
  const Gaze ext = image_extent(wide);
  EXPECT_FLOAT_EQ(ext.x, 2.0f);
  EXPECT_FLOAT_EQ(ext.y, 1.0f);
  const Gaze tall_ext = image_extent({900, 300});
  EXPECT_FLOAT_EQ(tall_ext.x, 1.0f);
  EXPECT_FLOAT_EQ(tall_ext.y, 3.0f);
  // z = 0 at the centre of the wide image: a 300 px square in the middle.
  const CropBox b = to_crop_box({1.0f, 0.5f, 0.0f}, wide, 2);
  EXPECT_FLOAT_EQ(b.x0, 150);
  EXPECT_FLOAT_EQ(b.x1, 450);
  EXPECT_FLOAT_EQ(b.y0, 0);
  EXPECT_FLOAT_EQ(b.y1, 300);
  EXPECT_EQ(b.image, 2);
  // z = 1: half the short side.
  const CropBox h = to_crop_box({0.25f, 0.25f, 1.0f}, wide);
  EXPECT_FLOAT_EQ(h.x1 - h.x0, 150);
  EXPECT_FLOAT_EQ(h.x0, 0);
  // ViT full grid: centred, covering exactly the short side.
  const GridView v = vit_full_grid(wide);
  EXPECT_FLOAT_EQ(v.zoom, 4.0f);
  const CropBox first = to_crop_box(v.patches.front(), wide);
  const CropBox last = to_crop_box(v.patches.back(), wide);
  EXPECT_NEAR(first.y0, 0, 1e-3);
  EXPECT_NEAR(last.y1, 300, 1e-3);
  EXPECT_NEAR(first.x0, 150, 1e-3);
  EXPECT_NEAR(last.x1, 450, 1e-3);
  EXPECT_NEAR(first.x1 - first.x0, 300.0 / 16, 1e-3);
}

TEST(Geometry, GazeSamplesStayInsideAndAreReproducible) {
  std::mt19937_64 a(9), b(9);
  const ImageSize size{200, 700};
  const Gaze ext = image_extent(size);
  for (int i = 0; i < 1000; ++i) {
    const Gaze g = sample_gaze(size, a);
    EXPECT_GE(g.x, 0);
    EXPECT_LE(g.x, ext.x);
    EXPECT_GE(g.y, 0);
    EXPECT_LE(g.y, ext.y);
    const Gaze h = sample_gaze(size, b);
    EXPECT_EQ(g.x, h.x);
    EXPECT_EQ(g.y, h.y);
  }
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(Geometry, BadInputNamesTheParameter) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937_64 rng(1);
  EXPECT_NE(error_of([&] { foveal_grid({nan, 0.5f}, 3, 4); }).find("gaze.x"), std::string::npos);
  EXPECT_NE(error_of([&] { multizoom_patches({0.5f, nan}, 3); }).find("gaze.y"), std::string::npos);
  EXPECT_NE(error_of([&] { multizoom_patches({0.5f, 0.5f}, 0); }).find("m "), std::string::npos);
  EXPECT_NE(error_of([&] { foveal_grid({0.5f, 0.5f}, 3, 0); }).find("g "), std::string::npos);
  EXPECT_NE(error_of([&] { foveal_grid({0.5f, 0.5f}, nan, 3); }).find("z"), std::string::npos);
  EXPECT_NE(error_of([&] { sample_gaze({0, 10}, rng); }).find("size.height"), std::string::npos);
  EXPECT_NE(error_of([&] { global_view({10, -5}, rng); }).find("size.width"), std::string::npos);
  EXPECT_NE(error_of([&] {
              random_grid_view({10, 10}, 4, 0.5f, 0.2f, rng);
            }).find("scale"),
            std::string::npos);
  EXPECT_NE(error_of([&] { zoom_for_scale(16, 0.0f); }).find("scale"), std::string::npos);
  EXPECT_NE(error_of([&] {
              to_crop_box({0.5f, 0.5f, nan}, {10, 10});
            }).find("patch.z"),
            std::string::npos);
}

}  // namespace
}  // namespace saccade::kernels
