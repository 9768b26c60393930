#include "dataloader/views.h"

#include <fmt/format.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>

#include "dataloader/augment.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"

namespace saccade::data {
namespace {

using kernels::PatchXYZ;

void require(bool ok, const char* field, const std::string& expected) {
  if (!ok) throw std::invalid_argument(fmt::format("views.{}: expected {}", field, expected));
}

// One glimpse at `gaze`: M multi-zoom patches, then the foveal grid at zoom z.
void add_glimpse(const ViewOptions& o, kernels::Gaze gaze, float z, std::vector<PatchXYZ>& out) {
  const auto zooms = kernels::multizoom_patches(gaze, o.multizoom, 0.0f, o.zoom_max);
  const auto grid = kernels::foveal_grid(gaze, z, o.fovea_grid);
  out.insert(out.end(), zooms.begin(), zooms.end());
  out.insert(out.end(), grid.begin(), grid.end());
}

// `glimpses` glimpses at random gazes.
void add_glimpses(const ViewOptions& o, int glimpses, kernels::ImageSize size, std::mt19937_64& rng,
                  std::vector<PatchXYZ>& out) {
  for (int k = 0; k < glimpses; ++k) {
    const kernels::Gaze gaze = kernels::sample_gaze(size, rng);
    const float z = o.fovea_zoom_min + static_cast<float>(kernels::uniform01(rng)) *
                                           (o.fovea_zoom_max - o.fovea_zoom_min);
    add_glimpse(o, gaze, z, out);
  }
}

// Cuts `patches` from `table` (one extraction call) into pixels [n, C, P, P] and
// positions [n, 3] = (x, y, z).
void extract_with_positions(const ViewOptions& o, const kernels::IntegralImage& table,
                            kernels::ImageSize size, const std::vector<PatchXYZ>& patches,
                            float* pixels, float* positions) {
  std::vector<kernels::CropBox> boxes;
  boxes.reserve(patches.size());
  kernels::to_crop_boxes(patches, size, 0, &boxes);
  kernels::extract_patches(std::span<const kernels::IntegralImage>(&table, 1), boxes, o.patch_size,
                           pixels, 1);
  for (size_t i = 0; i < patches.size(); ++i) {
    positions[3 * i] = patches[i].x;
    positions[3 * i + 1] = patches[i].y;
    positions[3 * i + 2] = patches[i].z;
  }
}

}  // namespace

void channel_stats(const ViewOptions& o, std::vector<float>& mean, std::vector<float>& stdev) {
  mean.resize(o.channels);
  stdev.resize(o.channels);
  for (int c = 0; c < o.channels; ++c) {
    mean[c] = o.pixel_mean[o.pixel_mean.size() == 1 ? 0 : c];
    stdev[c] = o.pixel_std[o.pixel_std.size() == 1 ? 0 : c];
  }
}

void ViewOptions::validate() const {
  require(patch_size >= 1 && patch_size <= kernels::kMaxPatchSize, "patch_size",
          fmt::format("1..{}, got {}", kernels::kMaxPatchSize, patch_size));
  require(channels == 1 || channels == 3, "channels", fmt::format("1 or 3, got {}", channels));
  require(multizoom >= 0 && fovea_grid >= 0 && glimpse_tokens() > 0, "multizoom",
          "multizoom + fovea_grid^2 > 0 tokens per glimpse");
  require(glimpses >= 1, "glimpses", fmt::format(">= 1, got {}", glimpses));
  require(global_grid >= 1 && local_grid >= 1, "global_grid", "grids of at least 1 x 1");
  require(local_views >= 0, "local_views", fmt::format(">= 0, got {}", local_views));
  require(fovea_zoom_min <= fovea_zoom_max, "fovea_zoom_min", "<= fovea_zoom_max");
  require(global_scale_min > 0 && global_scale_min <= global_scale_max && global_scale_max <= 1,
          "global_scale_min", "0 < global_scale_min <= global_scale_max <= 1");
  require(local_scale_min > 0 && local_scale_min <= local_scale_max && local_scale_max <= 1,
          "local_scale_min", "0 < local_scale_min <= local_scale_max <= 1");
  const auto stats_ok = [&](const std::vector<float>& v) {
    return (v.size() == 1 || static_cast<int>(v.size()) == channels);
  };
  require(stats_ok(pixel_mean), "pixel_mean", "1 or `channels` values");
  require(stats_ok(pixel_std) &&
              std::all_of(pixel_std.begin(), pixel_std.end(), [](float s) { return s > 0; }),
          "pixel_std", "1 or `channels` positive values");
}

void PatchBatch::resize(int64_t n, int64_t t, int64_t c, int64_t p) {
  views = n;
  tokens = t;
  channels = c;
  patch_size = p;
  patches.assign(static_cast<size_t>(n * t * c * p * p), 0.0f);
  positions.assign(static_cast<size_t>(n * t * 3), 0.0f);
}

void PixelViews::resize(int64_t n, int64_t t, int64_t c, int64_t p, int64_t rows_per_view,
                        bool cut_on_learner, bool pixel_buffer) {
  views = n;
  tokens = t;
  channels = c;
  patch_size = p;
  pieces = rows_per_view;
  pixels.assign(cut_on_learner || !pixel_buffer ? 0 : static_cast<size_t>(n * t * c * p * p), 0);
  boxes.assign(cut_on_learner ? static_cast<size_t>(n * t * 4) : 0, 0.0f);
  positions.assign(static_cast<size_t>(n * t * 3), 0.0f);
  augment.assign(static_cast<size_t>(n / pieces * kViewAugmentFloats), 0.0f);
  for (int64_t a = 0; a < n / pieces; ++a)
    encode_view_augment({}, augment.data() + a * kViewAugmentFloats);
}

void SslBatch::allocate(const ViewOptions& o, int64_t b, bool pixel_buffers) {
  batch_size = b;
  const int64_t gg = int64_t{o.global_grid} * o.global_grid,
                lg = int64_t{o.local_grid} * o.local_grid;
  const bool learner = o.cut_on_learner;
  const bool own = pixel_buffers;  // false: read_batch borrows the pixels
  teacher_global.resize(b, gg, o.channels, o.patch_size, 1, learner, own);
  student_global.resize(b, gg, o.channels, o.patch_size, 1, learner, own);
  student_local.resize(o.local_views * b, lg, o.channels, o.patch_size, 1, learner, own);
  teacher_seq.resize(o.glimpses * b, o.glimpse_tokens(), o.channels, o.patch_size, o.glimpses,
                     learner, own);
  student_seq.resize(o.glimpses * b, o.glimpse_tokens(), o.channels, o.patch_size, o.glimpses,
                     learner, own);
  images.assign(learner ? static_cast<size_t>(b) : 0, ShippedImage{});
  labels.assign(static_cast<size_t>(b), -1);
  indices.assign(static_cast<size_t>(b), -1);
  skipped_corrupt = 0;
}

namespace {

// The image as the kernels see it, after checking it fits the options and slot b.
kernels::ImageView checked_image(const ViewOptions& o, const cv::Mat& image, int64_t b,
                                 int64_t batch_size, const char* who) {
  if (image.empty() || image.depth() != CV_8U || image.channels() != o.channels) {
    throw std::invalid_argument(
        fmt::format("{}: expected a non-empty 8-bit image with {} channel(s), got "
                    "{}x{} with {} channel(s) of depth {}",
                    who, o.channels, image.cols, image.rows, image.channels(), image.depth()));
  }
  if (b < 0 || b >= batch_size) {
    throw std::invalid_argument(
        fmt::format("{}: slot {} outside the batch of {}", who, b, batch_size));
  }
  return {image.data, image.rows, image.cols, o.channels, static_cast<std::ptrdiff_t>(image.step)};
}

// Patches of one image and their positions [n, 3]. Cut at once (cut_patches): pixels
// [n, C, P, P] on the 0..255 scale. Planned (planned_cut): every patch's crop box and, when
// the data plane cuts, the image's table, for cut_rounded to cut a view's row at a time.
struct CutPatches {
  std::vector<float> pixels, positions;
  kernels::IntegralImage table;
  std::vector<kernels::CropBox> crops;
};
CutPatches cut_patches(const ViewOptions& o, const kernels::ImageView& view,
                       const std::vector<PatchXYZ>& patches) {
  const kernels::IntegralImage table = kernels::IntegralImage::build(view, 1);
  const int64_t patch_floats = int64_t{o.channels} * o.patch_size * o.patch_size;
  CutPatches cut;
  cut.pixels.resize(patches.size() * static_cast<size_t>(patch_floats));
  cut.positions.resize(patches.size() * 3);
  extract_with_positions(o, table, {view.height, view.width}, patches, cut.pixels.data(),
                         cut.positions.data());
  return cut;
}

CutPatches planned_cut(const kernels::ImageView& view, const std::vector<PatchXYZ>& patches,
                       bool build_table) {
  CutPatches cut;
  if (build_table) cut.table = kernels::IntegralImage::build(view, 1);
  cut.crops.reserve(patches.size());
  kernels::to_crop_boxes(patches, {view.height, view.width}, 0, &cut.crops);
  cut.positions.reserve(patches.size() * 3);
  for (const PatchXYZ& q : patches) cut.positions.insert(cut.positions.end(), {q.x, q.y, q.z});
  return cut;
}

// Cuts `crops` from `table` into `out` [n, C, P, P] as uint8 (box averages rounded to the
// nearest grey level), through a float scratch of a few patches: the floats stay in cache
// on their way to uint8 instead of a whole image's cut (7.7 MB at ViT-S views) going
// through memory.
void cut_rounded(const kernels::IntegralImage& table, std::span<const kernels::CropBox> crops,
                 int patch_size, uint8_t* out) {
  constexpr size_t kChunk = 64;  // 192 KiB of floats at P = 16, RGB
  thread_local std::vector<float> scratch;
  const size_t patch_values = static_cast<size_t>(table.channels()) * patch_size * patch_size;
  if (scratch.size() < kChunk * patch_values) scratch.resize(kChunk * patch_values);
  for (size_t begin = 0; begin < crops.size(); begin += kChunk) {
    const std::span<const kernels::CropBox> part =
        crops.subspan(begin, std::min(kChunk, crops.size() - begin));
    kernels::extract_patches(std::span<const kernels::IntegralImage>(&table, 1), part, patch_size,
                             scratch.data(), 1);
    // Box averages lie in [0, 255]. Local restrict pointers (a uint8 store may alias
    // anything, the vector's own fields included) and int32 let the loop vectorise.
    const float* __restrict from = scratch.data();
    uint8_t* __restrict to = out + begin * patch_values;
    const size_t n = part.size() * patch_values;
    for (size_t i = 0; i < n; ++i)
      to[i] = static_cast<uint8_t>(static_cast<int32_t>(from[i] + 0.5f));
  }
}

// One SSL view: where its tokens sit in the cut and which view of `target` it is.
struct SslSlice {
  PixelViews* target;
  int64_t first_token;
  int64_t view;  // a: its rows are k * A + a
  PhotometricSpec photometric;
};

// Draws each slice's augmentation (in slice order, when o.augment), mirrors the
// positions of flipped views, cuts each row's pixels as uint8 (or takes the boxes, when
// the learner cuts) into its place.
void scatter_ssl(const ViewOptions& o, kernels::ImageSize size, CutPatches& cut,
                 const std::vector<SslSlice>& slices, std::mt19937_64& rng) {
  const float extent_x = kernels::image_extent(size).x;
  for (const SslSlice& s : slices) {
    PixelViews& t = *s.target;
    const int64_t view_tokens = t.tokens * t.pieces;
    float* pos = cut.positions.data() + s.first_token * 3;
    ViewAugment augment;
    if (o.augment) augment = draw_view_augment(s.photometric, o.channels, o.patch_size, rng);
    if (augment.flip) {
      for (int64_t i = 0; i < view_tokens; ++i) pos[3 * i] = extent_x - pos[3 * i];
    }
    encode_view_augment(augment, t.augment.data() + s.view * kViewAugmentFloats);
    for (int64_t k = 0; k < t.pieces; ++k) {
      const int64_t row = k * t.augmented_views() + s.view;
      const int64_t first = s.first_token + k * t.tokens;
      const std::span<const kernels::CropBox> crops =
          std::span<const kernels::CropBox>(cut.crops).subspan(first, t.tokens);
      if (o.cut_on_learner) {
        float* boxes = t.boxes_of(row);
        for (const kernels::CropBox& c : crops) {
          boxes[0] = c.x0, boxes[1] = c.y0, boxes[2] = c.x1, boxes[3] = c.y1;
          boxes += 4;
        }
      } else {
        cut_rounded(cut.table, crops, o.patch_size, t.pixels_of(row));
      }
      std::memcpy(t.positions_of(row), pos + k * t.tokens * 3, t.tokens * 3 * sizeof(float));
    }
  }
}

// value = (value / 255 - mean[c]) / stdev[c] over `tokens` patches [C, plane].
void normalise(float* pixels, int64_t tokens, int channels, int64_t plane,
               const std::vector<float>& mean, const std::vector<float>& stdev) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const float scale = 1.0f / (255.0f * stdev[c]), shift = mean[c] / stdev[c];
      float* x = pixels + (t * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) x[i] = x[i] * scale - shift;
    }
  }
}

// Normalises the cut tokens [first, first + pieces * T) and scatters them into
// rows row, row + B, ... of an unaugmented float batch (evaluation views).
void scatter_normalised(const ViewOptions& o, CutPatches& cut, int64_t first, PatchBatch& target,
                        int64_t row, int64_t pieces, int64_t B) {
  std::vector<float> mean, stdev;
  channel_stats(o, mean, stdev);
  const int64_t plane = int64_t{o.patch_size} * o.patch_size;
  const int64_t patch_floats = o.channels * plane;
  float* pixels = cut.pixels.data() + first * patch_floats;
  normalise(pixels, pieces * target.tokens, o.channels, plane, mean, stdev);
  for (int64_t k = 0; k < pieces; ++k) {
    std::memcpy(target.patches_of(row + k * B), pixels + k * target.tokens * patch_floats,
                target.tokens * patch_floats * sizeof(float));
    std::memcpy(target.positions_of(row + k * B),
                cut.positions.data() + (first + k * target.tokens) * 3,
                target.tokens * 3 * sizeof(float));
  }
}

}  // namespace

void make_ssl_views(const ViewOptions& o, const cv::Mat& original, uint64_t seed, int64_t b,
                    SslBatch& batch) {
  // A learner that cuts gets the image as shipped, and the views are drawn on that.
  cv::Mat capped;
  if (o.cut_on_learner && o.ship_max_side > 0 &&
      std::max(original.rows, original.cols) > o.ship_max_side && !original.empty()) {
    const double scale =
        o.ship_max_side / static_cast<double>(std::max(original.rows, original.cols));
    cv::resize(original, capped,
               cv::Size(std::max(1, static_cast<int>(std::lround(original.cols * scale))),
                        std::max(1, static_cast<int>(std::lround(original.rows * scale)))),
               0, 0, cv::INTER_AREA);
  }
  const cv::Mat& image = capped.empty() ? original : capped;
  const kernels::ImageView view = checked_image(o, image, b, batch.batch_size, "make_ssl_views");
  if (o.cut_on_learner != batch.cut_on_learner())
    throw std::invalid_argument(fmt::format(
        "make_ssl_views: the batch was allocated for views cut on the {}, the options cut on "
        "the {}",
        batch.cut_on_learner() ? "learner" : "data plane",
        o.cut_on_learner ? "learner" : "data plane"));
  const kernels::ImageSize size{image.rows, image.cols};
  std::mt19937_64 rng(seed);

  // 1. Geometry of every view, in one list of patches.
  std::vector<PatchXYZ> patches;
  std::vector<SslSlice> slices;
  const int64_t B = batch.batch_size;
  auto add_grid = [&](PixelViews& target, int64_t view, int grid, float smin, float smax,
                      PhotometricSpec spec) {
    const kernels::GridView g = kernels::random_grid_view(size, grid, smin, smax, rng);
    slices.push_back({&target, static_cast<int64_t>(patches.size()), view, spec});
    patches.insert(patches.end(), g.patches.begin(), g.patches.end());
  };
  auto add_sequence = [&](PixelViews& target, PhotometricSpec spec) {
    slices.push_back({&target, static_cast<int64_t>(patches.size()), b, spec});
    add_glimpses(o, o.glimpses, size, rng, patches);
  };
  // DINOv2's two global crops: blur always on the first, rarely plus solarisation on the second.
  add_grid(batch.teacher_global, b, o.global_grid, o.global_scale_min, o.global_scale_max,
           {0.8f, 0.2f, 1.0f, 0.0f});
  add_grid(batch.student_global, b, o.global_grid, o.global_scale_min, o.global_scale_max,
           {0.8f, 0.2f, 0.1f, 0.2f});
  for (int l = 0; l < o.local_views; ++l) {
    add_grid(batch.student_local, l * B + b, o.local_grid, o.local_scale_min, o.local_scale_max,
             {0.8f, 0.2f, 0.5f, 0.0f});
  }
  add_sequence(batch.teacher_seq, {0.8f, 0.2f, 0.5f, 0.0f});
  add_sequence(batch.student_seq, {0.8f, 0.2f, 0.5f, 0.0f});

  // 2. Every patch's crop box and the image's table (or the boxes and, below, the image, for
  // a learner that cuts); draw augmentations, cut each view's rows into place.
  CutPatches cut = planned_cut(view, patches, /*build_table=*/!o.cut_on_learner);
  scatter_ssl(o, size, cut, slices, rng);
  if (o.cut_on_learner) {
    ShippedImage& shipped = batch.images[static_cast<size_t>(b)];
    shipped.height = image.rows;
    shipped.width = image.cols;
    const size_t row_bytes = static_cast<size_t>(image.cols) * o.channels;
    shipped.pixels.assign((row_bytes * image.rows + 7) / 8 * 8, 0);
    for (int y = 0; y < image.rows; ++y)
      std::memcpy(shipped.pixels.data() + y * row_bytes, image.ptr(y), row_bytes);
  }
}

void EvalBatch::allocate(const ViewOptions& o, int64_t b, int64_t k) {
  batch_size = b;
  glimpses = k;
  vit.resize(b, int64_t{o.vit_grid} * o.vit_grid, o.channels, o.patch_size);
  seq.resize(k * b, o.glimpse_tokens(), o.channels, o.patch_size);
  labels.assign(static_cast<size_t>(b), -1);
  indices.assign(static_cast<size_t>(b), -1);
}

void make_eval_views(const ViewOptions& options, const cv::Mat& image, uint64_t seed, int64_t b,
                     EvalBatch& batch) {
  ViewOptions o = options;
  o.augment = false;  // the frozen model sees the image as it is
  require(o.vit_grid >= 1, "vit_grid", fmt::format(">= 1, got {}", o.vit_grid));
  const kernels::ImageView view = checked_image(o, image, b, batch.batch_size, "make_eval_views");
  const kernels::ImageSize size{image.rows, image.cols};
  std::mt19937_64 rng(seed);
  const kernels::GridView grid = kernels::vit_full_grid(size, o.vit_grid);
  std::vector<PatchXYZ> patches = grid.patches;
  add_glimpses(o, static_cast<int>(batch.glimpses), size, rng, patches);
  CutPatches cut = cut_patches(o, view, patches);
  scatter_normalised(o, cut, 0, batch.vit, b, 1, batch.batch_size);
  scatter_normalised(o, cut, static_cast<int64_t>(grid.patches.size()), batch.seq, b,
                     batch.glimpses, batch.batch_size);
}

GlimpseCutter::GlimpseCutter(const ViewOptions& options, const cv::Mat& image)
    : options_(options), height_(image.rows), width_(image.cols) {
  options_.augment = false;
  const kernels::ImageView view = checked_image(options_, image, 0, 1, "GlimpseCutter");
  channel_stats(options_, mean_, stdev_);
  table_ = kernels::IntegralImage::build(view, 1);
  const kernels::Gaze extent = kernels::image_extent({height_, width_});
  extent_x_ = extent.x;
  extent_y_ = extent.y;
}

void GlimpseCutter::cut(float x, float y, float fovea_zoom, PatchBatch& out, int64_t row) const {
  if (!std::isfinite(x) || !std::isfinite(y) || !std::isfinite(fovea_zoom))
    throw std::invalid_argument(fmt::format(
        "GlimpseCutter::cut: gaze ({}, {}) and zoom {} must be finite", x, y, fovea_zoom));
  if (out.tokens != options_.glimpse_tokens() || out.channels != options_.channels ||
      out.patch_size != options_.patch_size || row < 0 || row >= out.views)
    throw std::invalid_argument(fmt::format(
        "GlimpseCutter::cut: view {} of a batch of {} x {} tokens (C {}, P {}); expected a row "
        "of {} tokens (C {}, P {})",
        row, out.views, out.tokens, out.channels, out.patch_size, options_.glimpse_tokens(),
        options_.channels, options_.patch_size));
  const kernels::Gaze gaze{std::clamp(x, 0.0f, extent_x_), std::clamp(y, 0.0f, extent_y_)};
  std::vector<PatchXYZ> patches;
  add_glimpse(options_, gaze, fovea_zoom, patches);
  float* pixels = out.patches_of(row);
  extract_with_positions(options_, table_, {height_, width_}, patches, pixels,
                         out.positions_of(row));
  normalise(pixels, out.tokens, options_.channels,
            int64_t{options_.patch_size} * options_.patch_size, mean_, stdev_);
}

}  // namespace saccade::data
