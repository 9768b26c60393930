#include "dataloader/views.h"

#include <fmt/format.h>

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

// Where one view's tokens sit in the per-image scratch buffer, and how to augment it.
struct ViewSlice {
  PatchBatch* target;
  int64_t first_token;  // in the scratch buffer
  int64_t tokens;       // of the whole view (K glimpses for a sequential view)
  int64_t row;          // target view row of the first piece
  int64_t pieces;       // 1, or K glimpses scattered step-major
  PhotometricSpec photometric;
};

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

// Per-channel normalisation constants (one config value may stand for all channels).
void channel_stats(const ViewOptions& o, std::vector<float>& mean, std::vector<float>& stdev) {
  mean.resize(o.channels);
  stdev.resize(o.channels);
  for (int c = 0; c < o.channels; ++c) {
    mean[c] = o.pixel_mean[o.pixel_mean.size() == 1 ? 0 : c];
    stdev[c] = o.pixel_std[o.pixel_std.size() == 1 ? 0 : c];
  }
}

}  // namespace

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

void SslBatch::allocate(const ViewOptions& o, int64_t b) {
  batch_size = b;
  const int64_t gg = int64_t{o.global_grid} * o.global_grid,
                lg = int64_t{o.local_grid} * o.local_grid;
  teacher_global.resize(b, gg, o.channels, o.patch_size);
  student_global.resize(b, gg, o.channels, o.patch_size);
  student_local.resize(o.local_views * b, lg, o.channels, o.patch_size);
  teacher_seq.resize(o.glimpses * b, o.glimpse_tokens(), o.channels, o.patch_size);
  student_seq.resize(o.glimpses * b, o.glimpse_tokens(), o.channels, o.patch_size);
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

// Cuts `patches` from the image's integral image in one extraction call, then
// augments (when o.augment) and normalises each slice as a whole and scatters it
// into its batch rows (`B` apart for the pieces of a sequence).
void cut_slices(const ViewOptions& o, const kernels::ImageView& view,
                const std::vector<PatchXYZ>& patches, const std::vector<ViewSlice>& slices,
                int64_t B, std::mt19937_64& rng) {
  const kernels::IntegralImage table = kernels::IntegralImage::build(view, 1);
  const kernels::ImageSize size{view.height, view.width};
  const int64_t patch_floats = int64_t{o.channels} * o.patch_size * o.patch_size;
  std::vector<float> pixels(static_cast<size_t>(patches.size() * patch_floats));
  std::vector<float> positions(patches.size() * 3);
  extract_with_positions(o, table, size, patches, pixels.data(), positions.data());
  const float extent_x = kernels::image_extent(size).x;
  std::vector<float> mean, stdev;
  channel_stats(o, mean, stdev);
  for (const ViewSlice& s : slices) {
    if (s.pieces == 0) continue;  // an evaluation without glimpses (ViT mode only)
    const ViewPixels v{pixels.data() + s.first_token * patch_floats, s.tokens, o.channels,
                       o.patch_size};
    float* pos = positions.data() + s.first_token * 3;
    if (o.augment) {
      augment_photometric(v, s.photometric, rng);
      if (kernels::uniform01(rng) < 0.5) flip_horizontal(v, pos, extent_x);
    }
    normalize(v, mean.data(), stdev.data());
    const int64_t piece = s.tokens / s.pieces;
    for (int64_t k = 0; k < s.pieces; ++k) {
      const int64_t row = s.row + k * B;  // step-major for sequences
      std::memcpy(s.target->patches_of(row), v.patches + k * piece * patch_floats,
                  piece * patch_floats * sizeof(float));
      std::memcpy(s.target->positions_of(row), pos + k * piece * 3, piece * 3 * sizeof(float));
    }
  }
}

}  // namespace

void make_ssl_views(const ViewOptions& o, const cv::Mat& image, uint64_t seed, int64_t b,
                    SslBatch& batch) {
  const kernels::ImageView view = checked_image(o, image, b, batch.batch_size, "make_ssl_views");
  const kernels::ImageSize size{image.rows, image.cols};
  std::mt19937_64 rng(seed);

  // 1. Geometry of every view, in one list of patches.
  std::vector<PatchXYZ> patches;
  std::vector<ViewSlice> slices;
  const int64_t B = batch.batch_size;
  auto add_grid = [&](PatchBatch& target, int64_t row, int grid, float smin, float smax,
                      PhotometricSpec spec) {
    const kernels::GridView g = kernels::random_grid_view(size, grid, smin, smax, rng);
    slices.push_back({&target, static_cast<int64_t>(patches.size()),
                      static_cast<int64_t>(g.patches.size()), row, 1, spec});
    patches.insert(patches.end(), g.patches.begin(), g.patches.end());
  };
  auto add_sequence = [&](PatchBatch& target, PhotometricSpec spec) {
    const int64_t first = static_cast<int64_t>(patches.size());
    add_glimpses(o, o.glimpses, size, rng, patches);
    slices.push_back(
        {&target, first, static_cast<int64_t>(patches.size()) - first, b, o.glimpses, spec});
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

  // 2. One extraction call for all of them; augment, normalise, scatter.
  cut_slices(o, view, patches, slices, B, rng);
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
  const int64_t vit_tokens = static_cast<int64_t>(grid.patches.size());
  const std::vector<ViewSlice> slices = {{&batch.vit, 0, vit_tokens, b, 1, {}},
                                         {&batch.seq,
                                          vit_tokens,
                                          static_cast<int64_t>(patches.size()) - vit_tokens,
                                          b,
                                          batch.glimpses,
                                          {}}};
  cut_slices(o, view, patches, slices, batch.batch_size, rng);
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
  normalize({pixels, out.tokens, options_.channels, options_.patch_size}, mean_.data(),
            stdev_.data());
}

}  // namespace saccade::data
