#include "kernels/extract.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/crop_resize.h"
#include "test_images.h"

namespace saccade::kernels {
namespace {

using testing::brute_sum;
using testing::make_image;
using testing::TestImage;

std::vector<float> run(const IntegralImage& t, const std::vector<CropBox>& boxes, int p,
                       int threads = 1) {
  std::vector<float> out(boxes.size() * t.channels() * p * p, -1.0f);
  extract_patches(std::span<const IntegralImage>(&t, 1), boxes, p, out.data(), threads);
  return out;
}

// Reference for integer-aligned crops whose sides are multiples of P: each cell is
// an exact integer box; outside pixels count as zero in the area.
void expect_aligned(const TestImage& img, const std::vector<CropBox>& boxes, int p,
                    const std::vector<float>& out) {
  const int C = img.channels;
  for (std::size_t n = 0; n < boxes.size(); ++n) {
    const auto& b = boxes[n];
    const long long cw = static_cast<long long>(b.x1 - b.x0) / p;
    const long long ch = static_cast<long long>(b.y1 - b.y0) / p;
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < p; ++r)
        for (int k = 0; k < p; ++k) {
          const long long x0 = static_cast<long long>(b.x0) + k * cw;
          const long long y0 = static_cast<long long>(b.y0) + r * ch;
          const double want = static_cast<double>(brute_sum(img, x0, y0, x0 + cw, y0 + ch, c)) /
                              static_cast<double>(cw * ch);
          const float got = out[((n * C + c) * p + r) * p + k];
          ASSERT_NEAR(got, want, std::max(1e-6 * want, 1e-12))
              << "box " << n << " c=" << c << " r=" << r << " k=" << k;
        }
  }
}

TEST(Extract, PixelAlignedCropsMatchBruteForce) {
  for (int C : {1, 3}) {
    const TestImage img = make_image(97, 130, C, 11, 1, 3);
    const IntegralImage t = IntegralImage::build(img.view());
    std::mt19937_64 rng(C);
    for (int p : {1, 4, 7, 16}) {
      std::vector<CropBox> boxes;
      for (int i = 0; i < 40; ++i) {
        const int cw = 1 + static_cast<int>(rng() % 6), ch = 1 + static_cast<int>(rng() % 6);
        const int x0 = static_cast<int>(rng() % 120), y0 = static_cast<int>(rng() % 90);
        boxes.push_back({static_cast<float>(x0), static_cast<float>(y0),
                         static_cast<float>(x0 + cw * p), static_cast<float>(y0 + ch * p), 0});
      }
      expect_aligned(img, boxes, p, run(t, boxes, p));
    }
  }
}

// Crops that leave the image through every border and every corner: the outside
// reads as zero and counts in the area (a half-outside cell averages with zeros).
TEST(Extract, ZeroPaddingAtEveryBorderAndCorner) {
  const TestImage img = make_image(64, 80, 3, 3, 2);  // all 255: padding shows as < 255
  const IntegralImage t = IntegralImage::build(img.view());
  const int p = 8;
  std::vector<CropBox> boxes;
  for (int dy : {-1, 0, 1})
    for (int dx : {-1, 0, 1}) {
      // A 32x32 crop centred on the left/centre/right border x top/middle/bottom border.
      const float cx = dx < 0 ? 0.f : dx == 0 ? 40.f : 80.f;
      const float cy = dy < 0 ? 0.f : dy == 0 ? 32.f : 64.f;
      boxes.push_back({cx - 16, cy - 16, cx + 16, cy + 16, 0});
    }
  boxes.push_back({-200, -200, -100, -100, 0});  // fully outside: all zero
  boxes.push_back({-4, -4, 84, 68, 0});          // 4-pixel frame around the whole image
  const auto out = run(t, boxes, p);
  expect_aligned(img, std::vector<CropBox>(boxes.begin(), boxes.end() - 1), p,
                 std::vector<float>(out.begin(), out.end() - 3 * p * p));
  for (int i = 0; i < 3 * p * p; ++i) ASSERT_EQ(out[9 * 3 * p * p + i], 0.0f);
  // The frame crop: cells are 11 x 9 pixels; corner cells have 7 x 5 inside.
  const float* frame = out.data() + 10 * 3 * p * p;
  EXPECT_NEAR(frame[0], 255.0 * 7 * 5 / (11 * 9), 1e-4);
  EXPECT_NEAR(frame[p * p - 1], 255.0 * 7 * 5 / (11 * 9), 1e-4);
  EXPECT_NEAR(frame[3 * p + 3], 255.0, 1e-4);  // interior cell
  // The centre crop is entirely inside: all 255.
  for (int i = 0; i < 3 * p * p; ++i) ASSERT_NEAR(out[4 * 3 * p * p + i], 255.0f, 1e-4);
  // Top-left corner crop: its top-left quadrant of cells is outside.
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[(p - 1) * p + p - 1], 255.0f, 1e-4);
}

// Arbitrary (sub-pixel, non-multiple) crops against the crop-then-INTER_AREA oracle.
// Tolerance: the oracle averages exact fractional cells of the rounded crop; we round
// each cell border to the nearest pixel, so a border moves by < 1 px: per cell
// |diff| <= 255 * (1/(w-1) + 1/(h-1)) (w, h = cell size in pixels). On a smooth image
// (waves of ~40 px period) the mean difference must stay below 1.5 grey levels, and
// the same check must fail for crops shifted by one pixel (the tolerance has teeth).
double mean_oracle_difference(const IntegralImage& t, const TestImage& img,
                              const std::vector<CropBox>& boxes, float shift, int p) {
  const auto ours = run(t, boxes, p);
  std::vector<CropBox> shifted = boxes;
  for (auto& b : shifted) {
    b.x0 += shift;
    b.x1 += shift;
  }
  std::vector<float> oracle(ours.size());
  CropResizeOptions opt;
  opt.float_crop = true;
  const ImageView view = img.view();
  crop_resize_patches(std::span<const ImageView>(&view, 1), shifted, p, oracle.data(), opt);
  double sum_abs = 0;
  for (std::size_t n = 0; n < boxes.size(); ++n) {
    const double w = (boxes[n].x1 - boxes[n].x0) / p, h = (boxes[n].y1 - boxes[n].y0) / p;
    const double bound = 255.0 * (1.0 / (w - 1) + 1.0 / (h - 1));
    for (int i = 0; i < 3 * p * p; ++i) {
      const double d = std::fabs(ours[n * 3 * p * p + i] - oracle[n * 3 * p * p + i]);
      EXPECT_LE(d, bound) << "box " << n << " element " << i;
      sum_abs += d;
    }
  }
  return sum_abs / static_cast<double>(ours.size());
}

TEST(Extract, ArbitraryCropsMatchCropResizeOracle) {
  const TestImage img = make_image(300, 420, 3, 17, 3, 1);
  const IntegralImage t = IntegralImage::build(img.view());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> pos(-40.f, 400.f), side(48.f, 260.f);
  const int p = 16;
  std::vector<CropBox> boxes;
  for (int i = 0; i < 200; ++i) {
    const float x0 = pos(rng), y0 = pos(rng) * 0.7f, w = side(rng), h = side(rng);
    boxes.push_back({x0, y0, x0 + w, y0 + h, 0});
  }
  const double mean = mean_oracle_difference(t, img, boxes, 0.0f, p);
  EXPECT_LT(mean, 1.5);
  EXPECT_GT(mean_oracle_difference(t, img, boxes, 1.0f, p), 1.5);
}

// A crop narrower than P pixels upsamples by nearest neighbour: every cell is >= 1 px.
TEST(Extract, TinyCropsUpsampleByNearestNeighbour) {
  const TestImage img = make_image(20, 20, 3, 4, 1);
  const IntegralImage t = IntegralImage::build(img.view());
  const int p = 8;
  const std::vector<CropBox> boxes = {{5, 6, 7, 8, 0}};  // 2 x 2 pixels -> 8 x 8
  const auto out = run(t, boxes, p);
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < p; ++r)
      for (int k = 0; k < p; ++k) {
        const long long x = static_cast<long long>(std::floor(5 + 2.0 / p * k + 0.5));
        const long long y = static_cast<long long>(std::floor(6 + 2.0 / p * r + 0.5));
        ASSERT_EQ(out[(c * p + r) * p + k], img.at(static_cast<int>(y), static_cast<int>(x), c));
      }
}

// Every extraction path (SSE RGB regular / irregular, generic C = 1 and 3, several
// gather blocks at P = 128) is bit-exact against brute-force cell sums run through the
// contract's arithmetic: float(sum) * (1/h * 1/w) in float. Odd image widths put
// corners at every position of a packed line; boxes leave the image and some are
// narrower than P pixels (irregular cells, repeated rows and columns).
TEST(Extract, AllPathsBitExactAgainstBruteForce) {
  for (int C : {3, 1}) {
    const TestImage img = make_image(61, 83, C, 23, 1, 1);
    const IntegralImage t = IntegralImage::build(img.view());
    std::mt19937_64 rng(C * 7);
    for (int p : {1, 2, 3, 4, 5, 8, 12, 16, 17, 20, 24, 32, 128}) {
      std::vector<CropBox> boxes;
      for (int i = 0; i < 24; ++i) {
        const float x0 = static_cast<float>(rng() % 1000) / 10.f - 10.f;
        const float y0 = static_cast<float>(rng() % 800) / 10.f - 10.f;
        const float scale = i % 3 == 0 ? 0.2f : i % 3 == 1 ? 1.0f : 3.0f;
        const float w = (1.f + static_cast<float>(rng() % 400) / 10.f) * scale;
        const float h = (1.f + static_cast<float>(rng() % 400) / 10.f) * scale;
        boxes.push_back({x0, y0, x0 + w, y0 + h, 0});
      }
      const auto out = run(t, boxes, p);
      for (std::size_t n = 0; n < boxes.size(); ++n) {
        std::int64_t bx[kMaxPatchSize + 1], by[kMaxPatchSize + 1];
        auto borders = [p](float a, float b, std::int64_t* o) {
          const double step = (static_cast<double>(b) - static_cast<double>(a)) / p;
          for (int k = 0; k <= p; ++k)
            o[k] = static_cast<std::int64_t>(std::floor(static_cast<double>(a) + step * k + 0.5));
        };
        borders(boxes[n].x0, boxes[n].x1, bx);
        borders(boxes[n].y0, boxes[n].y1, by);
        for (int c = 0; c < C; ++c)
          for (int r = 0; r < p; ++r)
            for (int k = 0; k < p; ++k) {
              const std::int64_t xr = std::max(bx[k + 1], bx[k] + 1),
                                 yr = std::max(by[r + 1], by[r] + 1);
              const float inv_w = 1.0f / static_cast<float>(xr - bx[k]);
              const float inv_h = 1.0f / static_cast<float>(yr - by[r]);
              const float want =
                  static_cast<float>(brute_sum(img, bx[k], by[r], xr, yr, c)) * (inv_h * inv_w);
              ASSERT_EQ(out[((n * C + c) * p + r) * p + k], want)
                  << "C=" << C << " p=" << p << " box " << n << " c=" << c << " r=" << r
                  << " k=" << k;
            }
      }
    }
  }
}

TEST(Extract, BatchOfImagesAndThreadsGiveTheSameResult) {
  const TestImage a = make_image(50, 70, 3, 1, 1), b = make_image(90, 40, 3, 2, 1);
  std::vector<IntegralImage> tables;
  tables.push_back(IntegralImage::build(a.view()));
  tables.push_back(IntegralImage::build(b.view()));
  std::mt19937_64 rng(8);
  std::vector<CropBox> boxes;
  for (int i = 0; i < 333; ++i) {
    const int img = static_cast<int>(rng() % 2);
    const float x = static_cast<float>(rng() % 60) - 5.3f,
                y = static_cast<float>(rng() % 60) - 3.1f;
    const float s = 2.0f + static_cast<float>(rng() % 40);
    boxes.push_back({x, y, x + s, y + s * 0.8f, img});
  }
  const int p = 12;
  std::vector<float> one(boxes.size() * 3 * p * p), many(one.size());
  extract_patches(tables, boxes, p, one.data(), 1);
  extract_patches(tables, boxes, p, many.data(), 4);
  ASSERT_EQ(one, many);
  // Each box equals extracting it alone from its own image.
  for (std::size_t n = 0; n < boxes.size(); n += 37) {
    CropBox single = boxes[n];
    single.image = 0;
    const auto alone = run(tables[boxes[n].image], {single}, p);
    for (int i = 0; i < 3 * p * p; ++i) ASSERT_EQ(alone[i], one[n * 3 * p * p + i]);
  }
}

// Tables above 2 MiB take the path that prefetches the next box's lines while cutting
// the current one, across images of different sizes and every kernel (RGB SSE regular
// and irregular, P not a multiple of 4, multi-block P = 128). Prefetching must not change
// a value: every box of the batch equals that box cut alone (no next box to prefetch).
TEST(Extract, PrefetchingAcrossLargeTablesChangesNothing) {
  const TestImage a = make_image(520, 700, 3, 5, 1), b = make_image(33, 47, 3, 6, 1);
  std::vector<IntegralImage> tables;
  tables.push_back(IntegralImage::build(a.view()));
  tables.push_back(IntegralImage::build(b.view()));
  ASSERT_GE(tables[0].bytes(), std::size_t{2} << 20);
  std::mt19937_64 rng(11);
  for (int p : {16, 12, 128}) {
    std::vector<CropBox> boxes;
    for (int i = 0; i < 70; ++i) {
      const int img = i % 5 == 4 ? 1 : 0;
      const float x = static_cast<float>(rng() % 700) - 40.3f,
                  y = static_cast<float>(rng() % 520) - 30.7f;
      // Tiny (irregular: fewer pixels than cells), medium and image-sized crops.
      const float s = i % 3 == 0 ? 3.5f : i % 3 == 1 ? 60.0f : 450.0f;
      boxes.push_back({x, y, x + s, y + s * 0.9f, img});
    }
    const std::size_t floats = std::size_t{3} * p * p;
    std::vector<float> batch(boxes.size() * floats), threaded(batch.size());
    extract_patches(tables, boxes, p, batch.data(), 1);
    extract_patches(tables, boxes, p, threaded.data(), 2);
    ASSERT_EQ(batch, threaded) << "p=" << p;
    for (std::size_t n = 0; n < boxes.size(); ++n) {
      CropBox single = boxes[n];
      single.image = 0;
      const auto alone = run(tables[boxes[n].image], {single}, p);
      for (std::size_t i = 0; i < floats; ++i)
        ASSERT_EQ(alone[i], batch[n * floats + i]) << "p=" << p << " box " << n << " i=" << i;
    }
  }
  // And a gray table above 2 MiB (the generic kernel), against the brute-force sum.
  const TestImage g = make_image(900, 800, 1, 7, 1);
  const IntegralImage gt = IntegralImage::build(g.view());
  ASSERT_GE(gt.bytes(), std::size_t{2} << 20);
  std::vector<CropBox> boxes;
  for (int i = 0; i < 20; ++i)
    boxes.push_back({static_cast<float>(37 * i), static_cast<float>(29 * i),
                     static_cast<float>(37 * i + 160), static_cast<float>(29 * i + 160), 0});
  const auto out = run(gt, boxes, 16);
  for (std::size_t n = 0; n < boxes.size(); ++n)
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) {
        const auto x0 = static_cast<std::int64_t>(boxes[n].x0) + 10 * k,
                   y0 = static_cast<std::int64_t>(boxes[n].y0) + 10 * r;
        const float want = static_cast<float>(brute_sum(g, x0, y0, x0 + 10, y0 + 10, 0)) *
                           (1.0f / 10.0f * (1.0f / 10.0f));
        ASSERT_EQ(out[(n * 16 + r) * 16 + k], want) << "box " << n << " r=" << r << " k=" << k;
      }
}

TEST(Extract, ExtractorInterfaceCpuBackend) {
  auto ex = make_extractor({Backend::kCpu, 2, 0});
  EXPECT_EQ(ex->backend(), Backend::kCpu);
  const TestImage a = make_image(40, 64, 1, 3, 1);
  const ImageView views[] = {a.view(), a.view()};
  ex->set_images(views);
  EXPECT_EQ(ex->num_images(), 2);
  EXPECT_EQ(ex->channels(), 1);
  const std::vector<CropBox> boxes = {{0, 0, 32, 32, 1}, {-8, -8, 8, 8, 0}};
  std::vector<float> out(2 * 4 * 4);
  ex->extract(boxes, 4, out.data());
  expect_aligned(a, boxes, 4, out);
  if (!cuda_device_available()) {
    EXPECT_THROW(make_extractor({Backend::kCuda, 0, 0}), std::runtime_error);
  }
}

// The queued call takes its own batch: it replaces the batch of set_images, cuts what
// set_images + extract cut, and refuses a box of an image it was not given before any work.
TEST(Extract, QueuedExtractionReplacesTheBatchAndCutsTheSame) {
  auto ex = make_extractor({Backend::kCpu, 2, 0});
  const TestImage a = make_image(40, 64, 3, 3, 1), b = make_image(50, 30, 3, 4, 0);
  const ImageView first[] = {a.view()}, second[] = {b.view(), a.view()};
  ex->set_images(first);
  const std::vector<CropBox> boxes = {{0, 0, 16, 16, 1}, {-3, 2, 20, 40, 0}, {5, 5, 9, 7, 0}};
  std::vector<float> queued(boxes.size() * 3 * 8 * 8, -1.0f), direct(queued.size(), -2.0f);
  ex->extract_queued(second, boxes, 8, queued.data(), nullptr);
  EXPECT_EQ(ex->num_images(), 2);
  auto fresh = make_extractor({Backend::kCpu, 1, 0});
  fresh->set_images(second);
  fresh->extract(boxes, 8, direct.data());
  EXPECT_EQ(queued, direct);
  const std::vector<CropBox> beyond = {{0, 0, 4, 4, 2}};
  try {
    ex->extract_queued(second, beyond, 8, queued.data(), nullptr);
    ADD_FAILURE() << "a box of a third image was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("boxes[0].image"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ex->num_images(), 2) << "a refused call must leave the batch as it was";
}

std::string error_of(const std::vector<CropBox>& boxes, int p, int num_images = 1) {
  const TestImage img = make_image(10, 10, 3, 1, 1);
  std::vector<IntegralImage> t;
  t.push_back(IntegralImage::build(img.view()));
  std::vector<float> out(boxes.size() * 3 * 128 * 128);
  try {
    extract_patches(std::span<const IntegralImage>(t.data(), num_images), boxes, p, out.data());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(Extract, BadInputNamesTheField) {
  const float nan = std::nanf("");
  EXPECT_NE(error_of({{0, 0, 4, 4, 0}}, 0).find("patch_size"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, 4, 0}}, -3).find("patch_size"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, 4, 0}}, 129).find("patch_size"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, 4, 0}, {nan, 0, 4, 4, 0}}, 4).find("boxes[1].x0"),
            std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, INFINITY, 0}}, 4).find("boxes[0].y1"), std::string::npos);
  EXPECT_NE(error_of({{4, 0, 4, 4, 0}}, 4).find("boxes[0].x1"), std::string::npos);
  EXPECT_NE(error_of({{0, 5, 4, 1, 0}}, 4).find("boxes[0].y1"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, 4, 1}}, 4).find("boxes[0].image"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 4, 4, 0}}, 4, 0).find("boxes[0].image"), std::string::npos);
  EXPECT_NE(error_of({{0, 0, 2e9f, 4, 0}}, 4).find("boxes[0].x1"), std::string::npos);
  // An empty table in the batch.
  std::vector<IntegralImage> empty(1);
  std::vector<float> out(16);
  const std::vector<CropBox> boxes = {{0, 0, 4, 4, 0}};
  EXPECT_THROW(extract_patches(empty, boxes, 2, out.data()), std::invalid_argument);
  // Mixed channel counts in one batch.
  auto ex = make_extractor({Backend::kCpu, 1, 0});
  const TestImage g = make_image(8, 8, 1, 1, 1), c = make_image(8, 8, 3, 1, 1);
  const ImageView mixed[] = {g.view(), c.view()};
  EXPECT_THROW(ex->set_images(mixed), std::invalid_argument);
}

}  // namespace
}  // namespace saccade::kernels
