#include "dataloader/views.h"

#include <gtest/gtest.h>

#include <cmath>
#include <opencv2/core.hpp>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "dataloader/augment.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"
#include "tests/support/reference_augment.h"

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

// `patches` of `image`: box averages on the 0..255 scale, [n, C, p, p].
std::vector<float> extracted(const cv::Mat& image, const std::vector<kernels::PatchXYZ>& patches,
                             int p) {
  const kernels::ImageView view{image.data, image.rows, image.cols, image.channels(),
                                static_cast<std::ptrdiff_t>(image.step)};
  const auto table = kernels::IntegralImage::build(view);
  std::vector<kernels::CropBox> boxes;
  kernels::to_crop_boxes(patches, {image.rows, image.cols}, 0, &boxes);
  std::vector<float> out(patches.size() * image.channels() * p * p);
  kernels::extract_patches(std::span<const kernels::IntegralImage>(&table, 1), boxes, p,
                           out.data());
  return out;
}

// Extracts `patches` from `image` and normalises them as the views do (mean 0.5, std 0.25).
std::vector<float> expected_patches(const cv::Mat& image,
                                    const std::vector<kernels::PatchXYZ>& patches, int p) {
  std::vector<float> out = extracted(image, patches, p);
  const float scale = 1.0f / (255.0f * 0.25f), shift = 0.5f / 0.25f;  // as normalize() computes it
  for (float& x : out) x = x * scale - shift;
  return out;
}

// The same patches as the data plane ships them: box averages rounded to uint8.
std::vector<uint8_t> expected_pixels(const cv::Mat& image,
                                     const std::vector<kernels::PatchXYZ>& patches, int p) {
  const std::vector<float> box = extracted(image, patches, p);
  std::vector<uint8_t> out(box.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::floor(box[i] + 0.5f));  // to nearest, halves up
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
  EXPECT_EQ(batch.student_seq.pixels.size(), size_t{6} * 13 * 3 * 8 * 8);
  EXPECT_EQ(batch.student_seq.pieces, 3);  // one augmentation per sequence, not per glimpse
  EXPECT_EQ(batch.student_seq.augment.size(), size_t{2} * kViewAugmentFloats);
  EXPECT_EQ(batch.student_local.augment.size(), size_t{4} * kViewAugmentFloats);
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
  EXPECT_EQ(a.student_seq.pixels, b.student_seq.pixels);
  EXPECT_EQ(a.student_local.augment, b.student_local.augment);
  EXPECT_EQ(a.teacher_global.positions, b.teacher_global.positions);
  EXPECT_NE(a.teacher_global.positions, c.teacher_global.positions);
}

// Replays make_ssl_views' draws for one image of seed `seed`: the geometry of every
// view in order, then (when augmenting) each view's augmentation in the same order.
struct Replayed {
  kernels::GridView tg, sg, l0, l1;
  std::vector<std::vector<kernels::PatchXYZ>> teacher_glimpses, student_glimpses;
  std::vector<ViewAugment> augment;  // tg, sg, l0, l1, teacher seq, student seq
};
Replayed replay(const ViewOptions& o, kernels::ImageSize size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Replayed r;
  r.tg = kernels::random_grid_view(size, 6, 0.32f, 1.0f, rng);
  r.sg = kernels::random_grid_view(size, 6, 0.32f, 1.0f, rng);
  r.l0 = kernels::random_grid_view(size, 3, 0.05f, 0.32f, rng);
  r.l1 = kernels::random_grid_view(size, 3, 0.05f, 0.32f, rng);
  r.teacher_glimpses = replay_glimpses(size, o.glimpses, rng);
  r.student_glimpses = replay_glimpses(size, o.glimpses, rng);
  if (!o.augment) return r;
  const PhotometricSpec specs[6] = {{0.8f, 0.2f, 1.0f, 0.0f}, {0.8f, 0.2f, 0.1f, 0.2f},
                                    {0.8f, 0.2f, 0.5f, 0.0f}, {0.8f, 0.2f, 0.5f, 0.0f},
                                    {0.8f, 0.2f, 0.5f, 0.0f}, {0.8f, 0.2f, 0.5f, 0.0f}};
  for (const PhotometricSpec& spec : specs)
    r.augment.push_back(draw_view_augment(spec, o.channels, o.patch_size, rng));
  return r;
}

ViewAugment augment_of(const PixelViews& v, int64_t view) {
  std::string why;
  const auto a = decode_view_augment(v.augment.data() + view * kViewAugmentFloats,
                                     static_cast<int>(v.patch_size), why);
  EXPECT_TRUE(a.has_value()) << why;
  return a.value_or(ViewAugment{});
}

bool same(const ViewAugment& a, const ViewAugment& b) {
  return a.jitter == b.jitter && a.order == b.order && a.brightness == b.brightness &&
         a.contrast == b.contrast && a.saturation == b.saturation && a.hue == b.hue &&
         a.grayscale == b.grayscale && a.blur_sigma == b.blur_sigma && a.solarize == b.solarize &&
         a.flip == b.flip;
}

TEST(Views, WithoutAugmentationViewsAreTheKernelsExtraction) {
  ViewOptions o = small_options(3);
  o.augment = false;
  const cv::Mat image = random_image(50, 70, 3, 9);
  SslBatch batch;
  batch.allocate(o, 2);
  make_ssl_views(o, image, 7, 1, batch);  // slot 1 of 2: checks the step-major scatter too

  const Replayed r = replay(o, {image.rows, image.cols}, 7);
  const int64_t pf = 3 * 8 * 8;
  auto slice = [&](PixelViews& pv, int64_t row) {
    return std::vector<uint8_t>(pv.pixels_of(row), pv.pixels_of(row) + pv.tokens * pf);
  };
  EXPECT_EQ(slice(batch.teacher_global, 1), expected_pixels(image, r.tg.patches, 8));
  EXPECT_EQ(slice(batch.student_global, 1), expected_pixels(image, r.sg.patches, 8));
  EXPECT_EQ(slice(batch.student_local, 0 * 2 + 1), expected_pixels(image, r.l0.patches, 8));
  EXPECT_EQ(slice(batch.student_local, 1 * 2 + 1), expected_pixels(image, r.l1.patches, 8));
  for (int k = 0; k < o.glimpses; ++k) {
    EXPECT_EQ(slice(batch.teacher_seq, k * 2 + 1), expected_pixels(image, r.teacher_glimpses[k], 8))
        << "glimpse " << k;
    EXPECT_FLOAT_EQ(batch.teacher_seq.positions_of(k * 2 + 1)[0], r.teacher_glimpses[k][0].x);
  }
  for (const PixelViews* v : {&batch.teacher_global, &batch.student_local, &batch.student_seq}) {
    for (int64_t a = 0; a < v->augmented_views(); ++a) EXPECT_TRUE(same(augment_of(*v, a), {}));
  }
  // Slot 0 was never written.
  EXPECT_EQ(batch.teacher_global.positions_of(0)[2], 0.0f);
}

// With augmentation the pixels are still the plain extraction (the learner's device
// augments them); each view carries the augmentation drawn in the order the views have
// always drawn it, and a flipped view's positions are mirrored.
TEST(Views, AugmentedViewsShipPlainPixelsTheirDrawsAndMirroredPositions) {
  const ViewOptions o = small_options(3);
  const cv::Mat image = random_image(50, 70, 3, 9);
  const kernels::ImageSize size{image.rows, image.cols};
  const float extent_x = kernels::image_extent(size).x;
  int flipped = 0, plain = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SslBatch batch;
    batch.allocate(o, 2);
    make_ssl_views(o, image, seed, 1, batch);
    const Replayed r = replay(o, size, seed);
    const std::pair<const PixelViews*, int64_t> views[6] = {
        {&batch.teacher_global, 1}, {&batch.student_global, 1}, {&batch.student_local, 1},
        {&batch.student_local, 3},  {&batch.teacher_seq, 1},    {&batch.student_seq, 1}};
    const std::vector<kernels::PatchXYZ>* geometry[6] = {
        &r.tg.patches, &r.sg.patches,          &r.l0.patches,
        &r.l1.patches, &r.teacher_glimpses[0], &r.student_glimpses[0]};
    for (int i = 0; i < 6; ++i) {
      const auto& [set, view] = views[i];
      const ViewAugment got = augment_of(*set, view);
      EXPECT_TRUE(same(got, r.augment[i])) << "seed " << seed << " view " << i;
      const auto& expected = *geometry[i];
      const float x = const_cast<PixelViews*>(set)->positions_of(view)[0];
      EXPECT_FLOAT_EQ(x, got.flip ? extent_x - expected[0].x : expected[0].x);
      (got.flip ? flipped : plain)++;
      const uint8_t* px = const_cast<PixelViews*>(set)->pixels_of(view);
      EXPECT_EQ(std::vector<uint8_t>(px, px + set->tokens * 3 * 64),
                expected_pixels(image, expected, 8))
          << "seed " << seed << " view " << i;
    }
  }
  EXPECT_GT(flipped, 10);  // both sides of the coin came up
  EXPECT_GT(plain, 10);
}

TEST(Augment, EncodedDrawsDecodeAndBadRowsAreRefusedByColumn) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    const ViewAugment a = draw_view_augment({0.8f, 0.2f, 0.5f, 0.2f}, 3, 16, rng);
    float row[kViewAugmentFloats];
    encode_view_augment(a, row);
    std::string why;
    const auto back = decode_view_augment(row, 16, why);
    ASSERT_TRUE(back.has_value()) << why;
    EXPECT_TRUE(same(*back, a));
  }
  auto refused = [](int column, float value, const char* says) {
    float row[kViewAugmentFloats];
    encode_view_augment({}, row);
    row[column] = value;
    std::string why;
    EXPECT_FALSE(decode_view_augment(row, 16, why).has_value()) << "column " << column;
    EXPECT_NE(why.find(says), std::string::npos) << why;
  };
  refused(kAugOrder + 1, 0.0f, "not a permutation");  // {0, 0, 2, 3}
  refused(kAugOrder, 4.0f, "not a permutation");
  refused(kAugBrightness, 2.0f, "brightness");
  refused(kAugHue, std::nanf(""), "hue");
  refused(kAugFlip, 0.5f, "flip is 0.5, expected 0 or 1");
  refused(kAugBlurSigma, 3.0f, "blur_sigma");  // > 2 * 16 / 14
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

// views.cut_on = "learner": the batch carries the image and every token's box instead of
// pixels; extracting the boxes from the image (what the learner does) gives the pixels the
// data plane would have shipped, with the same positions and augmentations.
TEST(Views, ALearnerThatCutsGetsTheSameViewsFromTheImageAndItsBoxes) {
  const ViewOptions data_side = small_options(3);
  ViewOptions learner_side = data_side;
  learner_side.cut_on_learner = true;
  learner_side.ship_max_side = 1000;
  const cv::Mat image = random_image(50, 70, 3, 9);
  SslBatch shipped_pixels, shipped_image;
  shipped_pixels.allocate(data_side, 2);
  shipped_image.allocate(learner_side, 2);
  make_ssl_views(data_side, image, 7, 1, shipped_pixels);
  make_ssl_views(learner_side, image, 7, 1, shipped_image);
  ASSERT_TRUE(shipped_image.cut_on_learner());
  const ShippedImage& got = shipped_image.images[1];
  ASSERT_EQ(got.height, 50);
  ASSERT_EQ(got.width, 70);
  ASSERT_EQ(got.pixels.size(), size_t{10504});  // 50 x 70 x 3 = 10,500, then zeros to a word
  EXPECT_EQ(std::vector<uint8_t>(got.pixels.begin(), got.pixels.begin() + 10500),
            std::vector<uint8_t>(image.data, image.data + 50 * 70 * 3));
  EXPECT_EQ(std::vector<uint8_t>(got.pixels.begin() + 10500, got.pixels.end()),
            std::vector<uint8_t>(4, 0));
  const auto table = kernels::IntegralImage::build({got.pixels.data(), 50, 70, 3, 0});
  for (auto set : {&SslBatch::teacher_global, &SslBatch::student_global, &SslBatch::student_local,
                   &SslBatch::teacher_seq, &SslBatch::student_seq}) {
    PixelViews& want = shipped_pixels.*set;
    PixelViews& have = shipped_image.*set;
    EXPECT_TRUE(have.pixels.empty());
    EXPECT_EQ(have.positions, want.positions);
    EXPECT_EQ(have.augment, want.augment);
    for (int64_t row = 1; row < have.views; row += 2) {  // slot 1's rows
      std::vector<kernels::CropBox> boxes;
      for (int64_t t = 0; t < have.tokens; ++t) {
        const float* b = have.boxes_of(row) + 4 * t;
        boxes.push_back({b[0], b[1], b[2], b[3], 0});
      }
      std::vector<float> cut(boxes.size() * 3 * 64);
      kernels::extract_patches(std::span<const kernels::IntegralImage>(&table, 1), boxes, 8,
                               cut.data());
      std::vector<uint8_t> rounded(cut.size());
      for (size_t i = 0; i < cut.size(); ++i)
        rounded[i] = static_cast<uint8_t>(std::floor(cut[i] + 0.5f));
      EXPECT_EQ(rounded, std::vector<uint8_t>(want.pixels_of(row),
                                              want.pixels_of(row) + want.tokens * 3 * 64))
          << "row " << row;
    }
  }
  // Over the cap, the image is shipped downscaled and the views are drawn on what is shipped.
  learner_side.ship_max_side = 35;
  SslBatch capped;
  capped.allocate(learner_side, 1);
  make_ssl_views(learner_side, image, 7, 0, capped);
  EXPECT_EQ(capped.images[0].height, 25);
  EXPECT_EQ(capped.images[0].width, 35);
  EXPECT_EQ(capped.images[0].pixels.size(), size_t{2632});  // 25 x 35 x 3, to a word
  // A batch allocated for the other side is refused.
  EXPECT_THROW(make_ssl_views(data_side, image, 7, 0, capped), std::invalid_argument);
}

// A flip mirrors each patch's columns (on the learner's device; here the reference map)
// and the cutter mirrors the positions: together exactly the view of the flipped image.
TEST(Views, FlipIsTheViewOfTheFlippedImage) {
  const cv::Mat image = random_image(32, 48, 3, 3);
  cv::Mat flipped;
  cv::flip(image, flipped, 1);
  const kernels::ImageSize size{32, 48};
  const float extent_x = kernels::image_extent(size).x;  // 1.5
  // Pixel-aligned patches: side 2^-2 * 32 = 8 pixels.
  const std::vector<kernels::PatchXYZ> patches = {
      {0.125f, 0.125f, 2}, {0.875f, 0.625f, 2}, {1.375f, 0.375f, 2}};
  std::vector<kernels::PatchXYZ> mirrored;
  for (auto p : patches) mirrored.push_back({extent_x - p.x, p.y, p.z});
  std::vector<float> got = expected_patches(image, patches, 8);
  ViewAugment flip;
  flip.flip = true;
  testing::reference_augment(got.data(), 3, 3, 8, flip);
  EXPECT_EQ(got, expected_patches(flipped, mirrored, 8));
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
