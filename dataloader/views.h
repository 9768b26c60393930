// The views cut from one image for sequential-to-global DINO (paper, Method):
// the teacher gets one global view and one sequential view; the student a
// different global view, L local views and a different sequential view. Every
// view is cut from ONE integral image of the image, so its cost does not grow
// with the image's size. Torch-free: data actors run without LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include <opencv2/core/mat.hpp>

#include "common/byte_buffer.h"
#include "dataloader/augment.h"
#include "kernels/integral_image.h"

namespace saccade::data {

// Geometry and augmentation of the views (config sections [views] and [data]).
struct ViewOptions {
  int patch_size = 0;  // P
  int channels = 0;    // C, 1 or 3; images must have this many
  int multizoom = 0;   // M concentric crops per glimpse, z = linspace(0, zoom_max, M)
  float zoom_max = 0;
  int fovea_grid = 0;  // G x G foveal grid per glimpse at a zoom uniform in [min, max]
  float fovea_zoom_min = 0;
  float fovea_zoom_max = 0;
  int glimpses = 0;  // K
  int global_grid = 0;
  float global_scale_min = 0;
  float global_scale_max = 0;
  int local_grid = 0;
  int local_views = 0;  // L
  float local_scale_min = 0;
  float local_scale_max = 0;
  int vit_grid = 0;  // ViT mode (probe and evaluation): a centred G x G grid over the short side
  std::vector<float> pixel_mean;  // per channel (or one for all), 0..1 scale
  std::vector<float> pixel_std;
  bool augment = true;  // DINOv2 photometric augmentations and horizontal flips
  // views.cut_on = "learner": training batches carry the decoded image (longer side at most
  // ship_max_side, downscaled by area) and each token's crop box instead of its pixels.
  bool cut_on_learner = false;
  int ship_max_side = 0;

  int glimpse_tokens() const { return multizoom + fovea_grid * fovea_grid; }
  // Throws std::invalid_argument naming the field.
  void validate() const;
};

// N views of T tokens each: patches [N, T, C, P, P] (normalised), positions
// [N, T, 3] = (x, y, z) in short-side units. Owns its buffers.
struct PatchBatch {
  int64_t views = 0;
  int64_t tokens = 0;
  int64_t channels = 0;
  int64_t patch_size = 0;
  std::vector<float> patches;
  std::vector<float> positions;

  void resize(int64_t n, int64_t t, int64_t c, int64_t p);
  int64_t patch_floats() const { return channels * patch_size * patch_size; }
  float* patches_of(int64_t view) { return patches.data() + view * tokens * patch_floats(); }
  float* positions_of(int64_t view) { return positions.data() + view * tokens * 3; }
};

// N rows of T tokens each as the data plane carries them, before augmentation:
// pixels [N, T, C, P, P], box averages rounded to uint8 (0..255), or, when the
// learner cuts, boxes [N, T, 4] = (x0, y0, x1, y1) in pixels of the row's image
// (image n % B of the batch, kernels::CropBox) and no pixels; positions
// [N, T, 3] = (x, y, z), flips already applied; augment [A, kViewAugmentFloats],
// one drawn augmentation per view (augment.h). A view is `pieces` rows, A apart
// (step-major: a sequence of K glimpses is rows a, A + a, ..., (K - 1) A + a),
// so N = pieces * A. The learner augments and normalises them on its device
// (workers/ssl/view_augment.h). Owns its buffers, but for pixels read in place from a
// received frame (data_plane::read_batch), which it keeps alive.
struct PixelViews {
  int64_t views = 0;  // N rows
  int64_t tokens = 0;
  int64_t channels = 0;
  int64_t patch_size = 0;
  int64_t pieces = 1;        // rows per view: K for sequences, else 1
  ByteBuffer pixels;         // empty when the learner cuts
  std::vector<float> boxes;  // empty when the data plane cuts
  std::vector<float> positions;
  std::vector<float> augment;

  // Sizes every buffer for N = n rows; pixels only with `pixel_buffer` (when the data plane
  // cuts: boxes otherwise).
  void resize(int64_t n, int64_t t, int64_t c, int64_t p, int64_t pieces, bool cut_on_learner,
              bool pixel_buffer = true);
  int64_t augmented_views() const { return views / pieces; }  // A
  int64_t patch_bytes() const { return channels * patch_size * patch_size; }
  uint8_t* pixels_of(int64_t row) { return pixels.data() + row * tokens * patch_bytes(); }
  float* positions_of(int64_t row) { return positions.data() + row * tokens * 3; }
  float* boxes_of(int64_t row) { return boxes.data() + row * tokens * 4; }
};

// A decoded image shipped to a learner that cuts its own views. Owns its pixels, or borrows
// them from a received frame.
struct ShippedImage {
  int height = 0;
  int width = 0;
  // HWC, rows packed (width * channels bytes), then zeros up to a multiple of 8 bytes (so
  // the wire can reference the buffer instead of copying it).
  ByteBuffer pixels;
};

// All views of a batch of B images. Sequential and local views are stored
// step-major: glimpse k (local view l) of image b is row k * B + b, so one
// step of the whole batch is one contiguous [B, T, ...] slice.
struct SslBatch {
  int64_t batch_size = 0;
  PixelViews teacher_global;         // B views of global_grid^2 tokens
  PixelViews student_global;         // B
  PixelViews student_local;          // L * B views of local_grid^2 tokens, one row each
  PixelViews teacher_seq;            // B views of K glimpses of glimpse_tokens(): K * B rows
  PixelViews student_seq;            // B views, K * B rows
  std::vector<ShippedImage> images;  // B when the learner cuts (views.cut_on), else empty
  std::vector<int64_t> labels;       // B (-1 when unlabeled)
  std::vector<int64_t> indices;      // B dataset indices actually used
  int64_t skipped_corrupt = 0;       // corrupt files skipped while filling it

  // Sizes every buffer for `b` images; pixel buffers only with `pixel_buffers` (false: for
  // a reader that borrows them, data_plane::read_batch).
  void allocate(const ViewOptions& options, int64_t b, bool pixel_buffers = true);
  bool cut_on_learner() const { return !images.empty(); }
};

// Per-channel normalisation constants of `options` (one config value may stand
// for all channels): value = (value / 255 - mean[c]) / stdev[c].
void channel_stats(const ViewOptions& options, std::vector<float>& mean, std::vector<float>& stdev);

// The views the frozen model is probed and evaluated on, without augmentation:
// the ViT-mode grid, and a sequence of `glimpses` glimpses at random gazes
// (stored step-major like SslBatch's sequences).
struct EvalBatch {
  int64_t batch_size = 0;
  int64_t glimpses = 0;
  PatchBatch vit;                // B views of vit_grid^2 tokens
  PatchBatch seq;                // glimpses * B views of glimpse_tokens()
  std::vector<int64_t> labels;   // B (-1 when unlabeled)
  std::vector<int64_t> indices;  // B dataset indices actually used
  void allocate(const ViewOptions& options, int64_t b, int64_t glimpses);
};

// Cuts the evaluation views of one image into slot b; the gazes come from
// `seed` only. Thread-safe: keeps no state between calls.
void make_eval_views(const ViewOptions& options, const cv::Mat& image, uint64_t seed, int64_t b,
                     EvalBatch& batch);

// One image made ready for glimpses at gazes chosen one at a time (the gaze
// policy's rollouts and evaluation): its integral image is built once here and
// every glimpse is cut from it, unaugmented, so a glimpse costs the same at any
// image size. Owns the table; read-only after construction, so one cutter may
// serve several threads.
class GlimpseCutter {
 public:
  // Throws std::invalid_argument on an image that does not fit the options.
  GlimpseCutter(const ViewOptions& options, const cv::Mat& image);

  // (W, H) / min(W, H): gazes lie in [0, extent_x] x [0, extent_y].
  float extent_x() const { return extent_x_; }
  float extent_y() const { return extent_y_; }
  const ViewOptions& options() const { return options_; }

  // Cuts the glimpse at (x, y) (clamped into the image) with its foveal grid at
  // `fovea_zoom` into view `row` of `out`, which must hold glimpse_tokens() tokens.
  void cut(float x, float y, float fovea_zoom, PatchBatch& out, int64_t row) const;

 private:
  ViewOptions options_;
  std::vector<float> mean_, stdev_;  // per channel, for normalisation
  kernels::IntegralImage table_;
  int height_ = 0, width_ = 0;
  float extent_x_ = 1, extent_y_ = 1;
};

// Cuts every view of one image into slot b of a batch and draws its
// augmentation (when options.augment). With options.cut_on_learner it cuts
// nothing: slot b gets the image (downscaled to ship_max_side) and every token's
// crop box in it, which the learner extracts to the same pixels. The random draws come from `seed`
// only, so a given (seed, image) gives the same views on any thread, rank or run. Thread-safe:
// keeps no state between calls.
void make_ssl_views(const ViewOptions& options, const cv::Mat& image, uint64_t seed, int64_t b,
                    SslBatch& batch);

}  // namespace saccade::data
