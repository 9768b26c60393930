#include "dataloader/views.h"

#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <random>

#include "dataloader/augment.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"

namespace saccade::data {
namespace {

ViewOptions small_options(int channels) {
  ViewOptions o;
  o.patch_size = 8;
  o.channels = channels;
  o.multizoom = 4;
  o.zoom_max = 3.0f;
  o.fovea_grid = 3;
  o.fovea_zoom_min = 2.0f;
  o.fovea_zoom_max = 3.0f;
  o.glimpses = 3;
  o.global_grid = 6;
  o.global_scale_min = 0.32f;
  o.global_scale_max = 1.0f;
  o.local_grid = 3;
  o.local_views = 2;
  o.local_scale_min = 0.05f;
  o.local_scale_max = 0.32f;
  o.pixel_mean.assign(channels, 0.5f);
  o.pixel_std.assign(channels, 0.25f);
  return o;
}

cv::Mat random_image(int h, int w, int channels, uint64_t seed) {
  cv::Mat m(h, w, CV_8UC(channels));
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}

// Extracts `patches` from `image` and normalises them as the views do (mean 0.5, std 0.25).
std::vector<float> expected_patches(const cv::Mat& image,
                                    const std::vector<kernels::PatchXYZ>& patches, int p) {
  const kernels::ImageView view{image.data, image.rows, image.cols, image.channels(),
                                static_cast<std::ptrdiff_t>(image.step)};
  const auto table = kernels::IntegralImage::build(view);
  std::vector<kernels::CropBox> boxes;
  kernels::to_crop_boxes(patches, {image.rows, image.cols}, 0, &boxes);
  std::vector<float> out(patches.size() * image.channels() * p * p);
  kernels::extract_patches(std::span<const kernels::IntegralImage>(&table, 1), boxes, p,
                           out.data());
  const float scale = 1.0f / (255.0f * 0.25f), shift = 0.5f / 0.25f;  // as normalize() computes it
  for (float& x : out) x = x * scale - shift;
  return out;
}

// The patches of `k` glimpses as the views draw them with small_options' geometry
// (4 multi-zoom patches up to z = 3, a 3 x 3 fovea at z in [2, 3]).
std::vector<std::vector<kernels::PatchXYZ>> replay_glimpses(kernels::ImageSize size, int k,
                                                            std::mt19937_64& rng) {
  std::vector<std::vector<kernels::PatchXYZ>> glimpses;
  for (int i = 0; i < k; ++i) {
    const auto gaze = kernels::sample_gaze(size, rng);
    const float z = 2.0f + static_cast<float>(kernels::uniform01(rng)) * 1.0f;
    auto g = kernels::multizoom_patches(gaze, 4, 0.0f, 3.0f);
    const auto f = kernels::foveal_grid(gaze, z, 3);
    g.insert(g.end(), f.begin(), f.end());
    glimpses.push_back(g);
  }
  return glimpses;
}

TEST(Views, ShapesDoNotDependOnImageSize) {
  const ViewOptions o = small_options(3);
  SslBatch batch;
  batch.allocate(o, 2);
  make_ssl_views(o, random_image(40, 90, 3, 1), 11, 0, batch);
  make_ssl_views(o, random_image(700, 300, 3, 2), 12, 1, batch);
  EXPECT_EQ(batch.teacher_global.views, 2);
  EXPECT_EQ(batch.teacher_global.tokens, 36);
  EXPECT_EQ(batch.student_local.views, 4);
  EXPECT_EQ(batch.student_local.tokens, 9);
  EXPECT_EQ(batch.student_seq.views, 6);
  EXPECT_EQ(batch.student_seq.tokens, 4 + 9);
  EXPECT_EQ(batch.student_seq.patches.size(), size_t{6} * 13 * 3 * 8 * 8);
  // Every slot was written: the zoom of every sequential token is set (multizoom starts at z = 0,
  // so look at the foveal tokens, z >= 2).
  for (int64_t v = 0; v < batch.student_seq.views; ++v) {
    EXPECT_GE(batch.student_seq.positions_of(v)[3 * 12 + 2], 2.0f) << "view " << v;
  }
}

TEST(Views, SameSeedSameViewsOtherSeedOthers) {
  const ViewOptions o = small_options(3);
  const cv::Mat image = random_image(64, 80, 3, 5);
  SslBatch a, b, c;
  for (SslBatch* s : {&a, &b, &c}) s->allocate(o, 1);
  make_ssl_views(o, image, 99, 0, a);
  make_ssl_views(o, image, 99, 0, b);
  make_ssl_views(o, image, 100, 0, c);
  EXPECT_EQ(a.student_seq.patches, b.student_seq.patches);
  EXPECT_EQ(a.teacher_global.positions, b.teacher_global.positions);
  EXPECT_NE(a.teacher_global.positions, c.teacher_global.positions);
}

TEST(Views, WithoutAugmentationViewsAreTheKernelsExtraction) {
  ViewOptions o = small_options(3);
  o.augment = false;
  const cv::Mat image = random_image(50, 70, 3, 9);
  SslBatch batch;
  batch.allocate(o, 2);
  make_ssl_views(o, image, 7, 1, batch);  // slot 1 of 2: checks the step-major scatter too

  // Replay the geometry draws in make_ssl_views' order.
  std::mt19937_64 rng(7);
  const kernels::ImageSize size{image.rows, image.cols};
  const auto tg = kernels::random_grid_view(size, 6, 0.32f, 1.0f, rng);
  const auto sg = kernels::random_grid_view(size, 6, 0.32f, 1.0f, rng);
  const auto l0 = kernels::random_grid_view(size, 3, 0.05f, 0.32f, rng);
  const auto l1 = kernels::random_grid_view(size, 3, 0.05f, 0.32f, rng);
  const auto glimpses = replay_glimpses(size, o.glimpses, rng);
  const int64_t pf = 3 * 8 * 8;
  auto slice = [&](PatchBatch& pb, int64_t row) {
    return std::vector<float>(pb.patches_of(row), pb.patches_of(row) + pb.tokens * pf);
  };
  EXPECT_EQ(slice(batch.teacher_global, 1), expected_patches(image, tg.patches, 8));
  EXPECT_EQ(slice(batch.student_global, 1), expected_patches(image, sg.patches, 8));
  EXPECT_EQ(slice(batch.student_local, 0 * 2 + 1), expected_patches(image, l0.patches, 8));
  EXPECT_EQ(slice(batch.student_local, 1 * 2 + 1), expected_patches(image, l1.patches, 8));
  for (int k = 0; k < o.glimpses; ++k) {
    EXPECT_EQ(slice(batch.teacher_seq, k * 2 + 1), expected_patches(image, glimpses[k], 8))
        << "glimpse " << k;
    EXPECT_FLOAT_EQ(batch.teacher_seq.positions_of(k * 2 + 1)[0], glimpses[k][0].x);
  }
  // Slot 0 was never written.
  EXPECT_EQ(batch.teacher_global.positions_of(0)[2], 0.0f);
}

// Probe and evaluation views: the ViT grid over the short side and K random
// glimpses, never augmented even when the options ask for augmentation.
TEST(Views, EvalViewsAreTheVitGridAndRandomGlimpsesUnaugmented) {
  ViewOptions o = small_options(3);
  o.vit_grid = 4;
  ASSERT_TRUE(o.augment);
  const cv::Mat image = random_image(60, 90, 3, 4);
  EvalBatch batch;
  batch.allocate(o, 2, 5);
  make_eval_views(o, image, 21, 1, batch);
  const kernels::ImageSize size{image.rows, image.cols};
  const auto grid = kernels::vit_full_grid(size, 4);
  std::mt19937_64 rng(21);
  const auto glimpses = replay_glimpses(size, 5, rng);
  const int64_t pf = 3 * 8 * 8;
  auto slice = [&](PatchBatch& pb, int64_t row) {
    return std::vector<float>(pb.patches_of(row), pb.patches_of(row) + pb.tokens * pf);
  };
  EXPECT_EQ(batch.vit.tokens, 16);
  EXPECT_EQ(batch.seq.views, 10);
  EXPECT_EQ(slice(batch.vit, 1), expected_patches(image, grid.patches, 8));
  EXPECT_FLOAT_EQ(batch.vit.positions_of(1)[3 * 15], grid.patches[15].x);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(slice(batch.seq, k * 2 + 1), expected_patches(image, glimpses[k], 8))
        << "glimpse " << k;
    EXPECT_FLOAT_EQ(batch.seq.positions_of(k * 2 + 1)[1], glimpses[k][0].y);
  }
  EXPECT_EQ(batch.seq.positions_of(0)[2], 0.0f);  // slot 0 was never written
  o.vit_grid = 0;
  EXPECT_THROW(make_eval_views(o, image, 21, 0, batch), std::invalid_argument);
}

TEST(Views, GlimpseCutterCutsTheGlimpseAtTheGivenGaze) {
  const ViewOptions o = small_options(3);  // augment is on: the cutter ignores it
  const cv::Mat image = random_image(60, 90, 3, 7);
  const GlimpseCutter cutter(o, image);
  EXPECT_FLOAT_EQ(cutter.extent_x(), 1.5f);
  EXPECT_FLOAT_EQ(cutter.extent_y(), 1.0f);
  PatchBatch out;
  out.resize(3, o.glimpse_tokens(), 3, 8);
  auto glimpse = [&](kernels::Gaze g, float z) {
    auto patches = kernels::multizoom_patches(g, 4, 0.0f, 3.0f);
    const auto f = kernels::foveal_grid(g, z, 3);
    patches.insert(patches.end(), f.begin(), f.end());
    return patches;
  };
  const int64_t floats = o.glimpse_tokens() * 3 * 8 * 8;
  auto row = [&](int64_t r) {
    return std::vector<float>(out.patches_of(r), out.patches_of(r) + floats);
  };
  cutter.cut(1.2f, 0.3f, 2.5f, out, 1);
  const auto expected = glimpse({1.2f, 0.3f}, 2.5f);
  EXPECT_EQ(row(1), expected_patches(image, expected, 8));
  EXPECT_FLOAT_EQ(out.positions_of(1)[3 * 5], expected[5].x);
  EXPECT_FLOAT_EQ(out.positions_of(1)[3 * 5 + 2], expected[5].z);
  // A gaze outside the image is moved onto its border.
  cutter.cut(-3.0f, 7.0f, 2.0f, out, 2);
  EXPECT_EQ(row(2), expected_patches(image, glimpse({0.0f, 1.0f}, 2.0f), 8));
  EXPECT_EQ(out.positions_of(0)[0], 0.0f);  // row 0 was never written
  EXPECT_THROW(GlimpseCutter(o, random_image(20, 20, 1, 1)), std::invalid_argument);
}

TEST(Views, FlipIsTheViewOfTheFlippedImage) {
  const cv::Mat image = random_image(32, 48, 3, 3);
  cv::Mat flipped;
  cv::flip(image, flipped, 1);
  const kernels::ImageSize size{32, 48};
  const float extent_x = kernels::image_extent(size).x;  // 1.5
  // Pixel-aligned patches: side 2^-2 * 32 = 8 pixels.
  std::vector<kernels::PatchXYZ> patches = {
      {0.125f, 0.125f, 2}, {0.875f, 0.625f, 2}, {1.375f, 0.375f, 2}};
  std::vector<kernels::PatchXYZ> mirrored;
  for (auto p : patches) mirrored.push_back({extent_x - p.x, p.y, p.z});
  std::vector<float> got = expected_patches(image, patches, 8);
  std::vector<float> positions;
  for (auto p : patches) positions.insert(positions.end(), {p.x, p.y, p.z});
  flip_horizontal({got.data(), 3, 3, 8}, positions.data(), extent_x);
  EXPECT_EQ(got, expected_patches(flipped, mirrored, 8));
  EXPECT_FLOAT_EQ(positions[3], extent_x - 0.875f);
}

TEST(Augment, NothingHappensAtProbabilityZero) {
  std::vector<float> x(2 * 3 * 4 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 256);
  const std::vector<float> before = x;
  std::mt19937_64 rng(1);
  augment_photometric({x.data(), 2, 3, 4}, {0, 0, 0, 0}, rng);
  EXPECT_EQ(x, before);
}

TEST(Augment, GrayscaleSolariseAndJitterStayInRange) {
  std::vector<float> x(3 * 3 * 4 * 4);
  std::mt19937_64 fill(2);
  for (float& v : x) v = static_cast<float>(fill() % 256);
  std::mt19937_64 rng(3);
  augment_photometric({x.data(), 3, 3, 4}, {0, 1, 0, 0}, rng);  // grayscale only
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 16; ++i) {
      EXPECT_FLOAT_EQ(x[t * 48 + i], x[t * 48 + 16 + i]);
      EXPECT_FLOAT_EQ(x[t * 48 + i], x[t * 48 + 32 + i]);
    }
  }
  std::vector<float> y = {0, 100, 127, 128, 200, 255};
  augment_photometric({y.data(), 6, 1, 1}, {0, 0, 0, 1},
                      rng);  // solarise only (6 gray 1x1 patches)
  EXPECT_EQ(y, (std::vector<float>{0, 100, 127, 127, 55, 0}));
  for (int trial = 0; trial < 50; ++trial) {
    augment_photometric({x.data(), 3, 3, 4}, {1, 0.5f, 0.5f, 0.5f}, rng);
    for (float v : x) ASSERT_TRUE(v >= 0.0f && v <= 255.0f) << v;
  }
}

TEST(Augment, BlurKeepsAConstantPatchAndSmoothsAnEdge) {
  std::vector<float> flat(16 * 16, 77.0f);
  std::mt19937_64 rng(4);
  augment_photometric({flat.data(), 1, 1, 16}, {0, 0, 1, 0}, rng);
  for (float v : flat) EXPECT_NEAR(v, 77.0f, 1e-3);
  std::vector<float> edge(16 * 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) edge[y * 16 + x] = x < 8 ? 0.0f : 255.0f;
  augment_photometric({edge.data(), 1, 1, 16}, {0, 0, 1, 0}, rng);
  EXPECT_GT(edge[7], 0.0f);     // light leaks left of the edge
  EXPECT_LT(edge[8], 255.0f);   // and dark to the right
  EXPECT_LT(edge[7], edge[8]);  // still an edge
}

TEST(Views, BadInputIsRefused) {
  const ViewOptions o = small_options(3);
  SslBatch batch;
  batch.allocate(o, 1);
  EXPECT_THROW(make_ssl_views(o, random_image(10, 10, 1, 1), 0, 0, batch), std::invalid_argument);
  EXPECT_THROW(make_ssl_views(o, cv::Mat(), 0, 0, batch), std::invalid_argument);
  EXPECT_THROW(make_ssl_views(o, random_image(10, 10, 3, 1), 0, 1, batch), std::invalid_argument);
  ViewOptions bad = o;
  bad.pixel_std = {0.1f, 0.0f, 0.1f};
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = o;
  bad.channels = 2;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  EXPECT_NO_THROW(o.validate());
}

}  // namespace
}  // namespace saccade::data
