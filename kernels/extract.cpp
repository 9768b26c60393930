#include "kernels/extract.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace saccade::kernels {
namespace {

std::string box_field(std::size_t i, const char* name) {
  return "boxes[" + std::to_string(i) + "]." + name;
}

// floor(v) as an integer without a libm call (|v| < 2^62).
inline std::int64_t floor_to_int(double v) {
  const auto t = static_cast<std::int64_t>(v);
  return t - (static_cast<double>(t) > v);
}

// Cell borders along one axis: b_k = floor(a + step * k + 0.5), step = (b - a) / P,
// in double with no fused ops; the CUDA kernel mirrors these operations exactly.
inline void borders(float a, float b, int p, std::int64_t* out) {
  const double step = (static_cast<double>(b) - static_cast<double>(a)) / p;
  for (int k = 0; k <= p; ++k) out[k] = floor_to_int(static_cast<double>(a) + step * k + 0.5);
}

// Everything about one patch that does not depend on pixel values.
struct PatchPlan {
  int p = 0;
  bool regular_x = true;  // every cell >= 1 pixel wide: cell k's right = cell k+1's left
  bool fast = true;       // every clipped cell <= kMaxFastCellPixels
  std::int32_t cx[kMaxPatchSize + 1];                   // regular: offset of border j
  std::int32_t cxl[kMaxPatchSize], cxr[kMaxPatchSize];  // irregular: per-cell offsets
  std::int32_t ryl[kMaxPatchSize], ryr[kMaxPatchSize];  // clamped table rows per cell row
  std::int64_t bx[kMaxPatchSize + 1], by[kMaxPatchSize + 1];
  alignas(16) float inv_w[kMaxPatchSize];
  float inv_h[kMaxPatchSize];
};

inline std::int64_t cell_end(const std::int64_t* b, int k) {
  return std::max(b[k + 1], b[k] + 1);
}

void plan_patch(const CropBox& box, const IntegralImage& img, int p, PatchPlan* plan) {
  const int C = img.channels();
  const std::int64_t W = img.width(), H = img.height();
  plan->p = p;
  borders(box.x0, box.x1, p, plan->bx);
  borders(box.y0, box.y1, p, plan->by);
  const std::int64_t* bx = plan->bx;
  const std::int64_t* by = plan->by;
  bool regular = true;
  std::int64_t max_w = 0, max_h = 0;
  for (int k = 0; k <= p; ++k)
    plan->cx[k] = static_cast<std::int32_t>(std::clamp<std::int64_t>(bx[k], 0, W) * C);
  for (int k = 0; k < p; ++k) {
    const std::int64_t xr = cell_end(bx, k), yr = cell_end(by, k);
    regular &= bx[k + 1] > bx[k];
    const std::int64_t cl = std::clamp<std::int64_t>(bx[k], 0, W),
                       cr = std::clamp<std::int64_t>(xr, 0, W);
    plan->cxl[k] = static_cast<std::int32_t>(cl * C);
    plan->cxr[k] = static_cast<std::int32_t>(cr * C);
    plan->ryl[k] = static_cast<std::int32_t>(std::clamp<std::int64_t>(by[k], 0, H));
    plan->ryr[k] = static_cast<std::int32_t>(std::clamp<std::int64_t>(yr, 0, H));
    max_w = std::max(max_w, cr - cl);
    max_h = std::max<std::int64_t>(max_h, plan->ryr[k] - plan->ryl[k]);
    plan->inv_w[k] = 1.0f / static_cast<float>(xr - bx[k]);
    plan->inv_h[k] = 1.0f / static_cast<float>(yr - by[k]);
  }
  plan->regular_x = regular;
  plan->fast = max_w * max_h <= kMaxFastCellPixels;
}

// Horizontal differences of one table row: h[c][k] = S(xr_k, y, c) - S(xl_k, y, c)
// (mod 2^32). Channels are interleaved in the table, planar here.
template <int C, bool kRegular>
inline void row_diffs(const std::uint32_t* row, const PatchPlan& plan,
                      std::uint32_t (*h)[kMaxPatchSize]) {
  const int p = plan.p;
  if constexpr (kRegular) {
    std::uint32_t prev[C];
    for (int c = 0; c < C; ++c) prev[c] = row[plan.cx[0] + c];
    for (int k = 0; k < p; ++k) {
      const std::uint32_t* q = row + plan.cx[k + 1];
      for (int c = 0; c < C; ++c) {
        const std::uint32_t v = q[c];
        h[c][k] = v - prev[c];
        prev[c] = v;
      }
    }
  } else {
    for (int k = 0; k < p; ++k)
      for (int c = 0; c < C; ++c) h[c][k] = row[plan.cxr[k] + c] - row[plan.cxl[k] + c];
  }
}

// Software prefetch of corner row r (r in [0, P]) of the next patch, issued while the
// current patch computes: a large patch's corners are ~289 distinct cache lines, and
// the hardware prefetchers cannot guess them; this keeps many misses in flight.
inline void prefetch_row(const IntegralImage* img, const PatchPlan* plan, int r) {
  if (img == nullptr) return;
  const int y = r < plan->p ? plan->ryl[r] : plan->ryr[plan->p - 1];
  const std::uint32_t* row = img->row(y);
  if (plan->regular_x) {
    for (int j = 0; j <= plan->p; ++j) __builtin_prefetch(row + plan->cx[j]);
  } else {
    for (int k = 0; k < plan->p; ++k) {
      __builtin_prefetch(row + plan->cxl[k]);
      __builtin_prefetch(row + plan->cxr[k]);
    }
  }
}

// Portable path: any C, any P, irregular crops.
template <int C, bool kRegular>
void extract_generic(const IntegralImage& img, const PatchPlan& plan, float* out,
                     const IntegralImage* next_img, const PatchPlan* next) {
  const int p = plan.p;
  alignas(64) std::uint32_t buf_a[C][kMaxPatchSize], buf_b[C][kMaxPatchSize];
  std::uint32_t(*top)[kMaxPatchSize] = buf_a;
  std::uint32_t(*bottom)[kMaxPatchSize] = buf_b;
  int top_row = -1;
  for (int r = 0; r < p; ++r) {
    if (plan.ryl[r] != top_row) row_diffs<C, kRegular>(img.row(plan.ryl[r]), plan, top);
    row_diffs<C, kRegular>(img.row(plan.ryr[r]), plan, bottom);
    const float inv_h = plan.inv_h[r];
    for (int c = 0; c < C; ++c) {
      float* o = out + (c * p + r) * p;
      // Cell sums are < 2^31 on the fast path: the signed conversion is exact-rounded.
      for (int k = 0; k < p; ++k)
        o[k] = static_cast<float>(static_cast<std::int32_t>(bottom[c][k] - top[c][k])) *
               (inv_h * plan.inv_w[k]);
    }
    std::swap(top, bottom);  // this cell row's bottom is the next one's top
    top_row = plan.ryr[r];
    prefetch_row(next_img, next, r);
  }
  prefetch_row(next_img, next, p);
}

#if defined(__SSE2__)
// RGB, regular crop, P % 4 == 0: one 16-byte load fetches a corner's three channels
// (plus one ignored lane), so a row of corners is P + 1 loads and P subtractions;
// four cells at a time are converted, scaled and transposed to the planar output.
void extract_rgb_sse(const IntegralImage& img, const PatchPlan& plan, float* out,
                     const IntegralImage* next_img, const PatchPlan* next) {
  const int p = plan.p;
  alignas(16) __m128i buf_a[kMaxPatchSize], buf_b[kMaxPatchSize];
  __m128i* top = buf_a;
  __m128i* bottom = buf_b;
  auto diffs = [&](int y, __m128i* h) {
    const std::uint32_t* row = img.row(y);
    __m128i prev = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + plan.cx[0]));
    for (int k = 0; k < p; ++k) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + plan.cx[k + 1]));
      h[k] = _mm_sub_epi32(v, prev);
      prev = v;
    }
  };
  int top_row = -1;
  const std::size_t plane = static_cast<std::size_t>(p) * p;
  for (int r = 0; r < p; ++r) {
    if (plan.ryl[r] != top_row) diffs(plan.ryl[r], top);
    diffs(plan.ryr[r], bottom);
    const __m128 inv_h = _mm_set1_ps(plan.inv_h[r]);
    float* o = out + static_cast<std::size_t>(r) * p;
    for (int k = 0; k < p; k += 4) {
      const __m128 scale = _mm_mul_ps(inv_h, _mm_load_ps(plan.inv_w + k));
      __m128 f0 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(bottom[k], top[k])),
                             _mm_shuffle_ps(scale, scale, 0x00));
      __m128 f1 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(bottom[k + 1], top[k + 1])),
                             _mm_shuffle_ps(scale, scale, 0x55));
      __m128 f2 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(bottom[k + 2], top[k + 2])),
                             _mm_shuffle_ps(scale, scale, 0xAA));
      __m128 f3 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(bottom[k + 3], top[k + 3])),
                             _mm_shuffle_ps(scale, scale, 0xFF));
      _MM_TRANSPOSE4_PS(f0, f1, f2, f3);  // f_c = channel c of cells k..k+3
      _mm_storeu_ps(o + k, f0);
      _mm_storeu_ps(o + plane + k, f1);
      _mm_storeu_ps(o + 2 * plane + k, f2);
    }
    std::swap(top, bottom);
    top_row = plan.ryr[r];
    prefetch_row(next_img, next, r);
  }
  prefetch_row(next_img, next, p);
}
#endif

// Cells too large for the fast path (only huge crops with small P): exact strip sums.
void extract_exact(const IntegralImage& img, const PatchPlan& plan, float* out) {
  const int p = plan.p, C = img.channels();
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < p; ++r)
      for (int k = 0; k < p; ++k) {
        const std::int64_t xr = cell_end(plan.bx, k), yr = cell_end(plan.by, r);
        const std::uint64_t s = img.box_sum(plan.bx[k], plan.by[r], xr, yr, c);
        out[(c * p + r) * p + k] =
            static_cast<float>(static_cast<double>(s) / (static_cast<double>(xr - plan.bx[k]) *
                                                         static_cast<double>(yr - plan.by[r])));
      }
}

// Extracts the patch planned in `plan`, prefetching the corners of `next` (may be null).
void extract_planned(const IntegralImage& img, const PatchPlan& plan, float* out,
                     const IntegralImage* next_img, const PatchPlan* next) {
  if (next_img != nullptr && !next->fast) next_img = nullptr;
  if (!plan.fast) return extract_exact(img, plan, out);
  if (img.channels() == 3) {
#if defined(__SSE2__)
    if (plan.regular_x && plan.p % 4 == 0) return extract_rgb_sse(img, plan, out, next_img, next);
#endif
    if (plan.regular_x) return extract_generic<3, true>(img, plan, out, next_img, next);
    return extract_generic<3, false>(img, plan, out, next_img, next);
  }
  if (plan.regular_x) return extract_generic<1, true>(img, plan, out, next_img, next);
  return extract_generic<1, false>(img, plan, out, next_img, next);
}

}  // namespace

void validate_crops(std::span<const CropBox> boxes, int num_images, int patch_size) {
  if (patch_size < 1 || patch_size > kMaxPatchSize)
    throw std::invalid_argument("patch_size must be in [1, " + std::to_string(kMaxPatchSize) +
                                "], got " + std::to_string(patch_size));
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const CropBox& b = boxes[i];
    const float v[4] = {b.x0, b.y0, b.x1, b.y1};
    const char* names[4] = {"x0", "y0", "x1", "y1"};
    for (int j = 0; j < 4; ++j)
      if (!std::isfinite(v[j]) || std::fabs(v[j]) > kMaxCropCoordinate)
        throw std::invalid_argument(box_field(i, names[j]) +
                                    " must be finite and within +-1e9 pixels, got " +
                                    std::to_string(v[j]));
    if (!(b.x1 > b.x0))
      throw std::invalid_argument(box_field(i, "x1") + " must be > x0 (positive width), got x0=" +
                                  std::to_string(b.x0) + " x1=" + std::to_string(b.x1));
    if (!(b.y1 > b.y0))
      throw std::invalid_argument(box_field(i, "y1") + " must be > y0 (positive height), got y0=" +
                                  std::to_string(b.y0) + " y1=" + std::to_string(b.y1));
    if (b.image < 0 || b.image >= num_images)
      throw std::invalid_argument(box_field(i, "image") + " must be in [0, " +
                                  std::to_string(num_images) + "), got " + std::to_string(b.image));
  }
}

void extract_patches(std::span<const IntegralImage> images, std::span<const CropBox> boxes,
                     int patch_size, float* out, int num_threads) {
  validate_crops(boxes, static_cast<int>(images.size()), patch_size);
  if (boxes.empty()) return;
  if (out == nullptr) throw std::invalid_argument("out must not be null");
  for (std::size_t i = 0; i < images.size(); ++i) {
    if (images[i].empty())
      throw std::invalid_argument("images[" + std::to_string(i) + "] has no table (empty)");
    if (images[i].channels() != images[0].channels())
      throw std::invalid_argument("images[" + std::to_string(i) +
                                  "].channels must equal images[0]'s (" +
                                  std::to_string(images[0].channels()) + ")");
  }
  const int p = patch_size;
  const std::size_t patch_floats = static_cast<std::size_t>(images[0].channels()) * p * p;
  // Chunks of consecutive boxes: neighbouring boxes (a foveal grid) share table lines.
  constexpr int kChunk = 32;
  const int num_chunks = static_cast<int>((boxes.size() + kChunk - 1) / kChunk);
  parallel_for(num_threads, num_chunks, [&](int chunk) {
    PatchPlan plans[2];  // current and next (being prefetched)
    const std::size_t begin = static_cast<std::size_t>(chunk) * kChunk;
    const std::size_t end = std::min(boxes.size(), begin + kChunk);
    plan_patch(boxes[begin], images[boxes[begin].image], p, &plans[0]);
    for (std::size_t i = begin; i < end; ++i) {
      PatchPlan& cur = plans[(i - begin) & 1];
      PatchPlan& next = plans[(i - begin + 1) & 1];
      const IntegralImage* next_img = nullptr;
      if (i + 1 < end) {
        next_img = &images[boxes[i + 1].image];
        plan_patch(boxes[i + 1], *next_img, p, &next);
      }
      extract_planned(images[boxes[i].image], cur, out + i * patch_floats, next_img, &next);
    }
  });
}

}  // namespace saccade::kernels
