#include "kernels/extract.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SACCADE_EXTRACT_AVX2 1  // an AVX2 cell pass, chosen at run time (use_avx2)
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
  // Corner columns read per table row, as entry offsets (IntegralImage::column):
  // regular, nc = P + 1 borders; irregular, nc = 2P (cell k's left at 2k, right at 2k + 1).
  int nc = 0;
  std::int32_t col[2 * kMaxPatchSize];
  // The distinct 64-byte lines among those columns (entry offsets of line starts), for
  // prefetching: corners closer than a line apart share one.
  int nl = 0;
  std::int32_t line[2 * kMaxPatchSize];
  // Distinct table rows read, in order (consecutive duplicates removed), and for cell
  // row r the positions in that list of its top and bottom rows (non-decreasing).
  int ny = 0;
  std::int32_t rows[2 * kMaxPatchSize];
  std::int16_t top[kMaxPatchSize], bot[kMaxPatchSize];
  std::int64_t bx[kMaxPatchSize + 1], by[kMaxPatchSize + 1];
  alignas(16) float inv_w[kMaxPatchSize];
  float inv_h[kMaxPatchSize];
};

inline std::int64_t cell_end(const std::int64_t* b, int k) {
  return std::max(b[k + 1], b[k] + 1);
}

// The distinct lines among plan->col (consecutive duplicates removed).
void plan_lines(PatchPlan* plan) {
  plan->nl = 0;
  for (int j = 0; j < plan->nc; ++j) {
    const std::int32_t l = plan->col[j] & ~(kEntriesPerLine - 1);
    if (plan->nl == 0 || plan->line[plan->nl - 1] != l) plan->line[plan->nl++] = l;
  }
}

// The common case, with nothing to clip or merge: every cell at least a pixel on each side
// and the crop inside the image, so the table rows are the P + 1 borders themselves and
// cell k spans border k to k + 1. Branch-free loops (the divisions vectorise); the same
// values as the general plan below.
void plan_interior(const IntegralImage& img, int p, PatchPlan* plan) {
  const std::int64_t* bx = plan->bx;
  const std::int64_t* by = plan->by;
  std::int32_t w[kMaxPatchSize], h[kMaxPatchSize];
  std::int32_t max_w = 0, max_h = 0;
  for (int k = 0; k < p; ++k) {
    w[k] = static_cast<std::int32_t>(bx[k + 1] - bx[k]);
    h[k] = static_cast<std::int32_t>(by[k + 1] - by[k]);
    max_w = std::max(max_w, w[k]);
    max_h = std::max(max_h, h[k]);
  }
  for (int k = 0; k < p; ++k) plan->inv_w[k] = 1.0f / static_cast<float>(w[k]);
  for (int k = 0; k < p; ++k) plan->inv_h[k] = 1.0f / static_cast<float>(h[k]);
  for (int k = 0; k <= p; ++k) {
    plan->col[k] = static_cast<std::int32_t>(img.column(bx[k]));
    plan->rows[k] = static_cast<std::int32_t>(by[k]);
  }
  for (int k = 0; k < p; ++k) {
    plan->top[k] = static_cast<std::int16_t>(k);
    plan->bot[k] = static_cast<std::int16_t>(k + 1);
  }
  plan->nc = p + 1;
  plan->ny = p + 1;
  plan->regular_x = true;
  plan->fast = static_cast<std::int64_t>(max_w) * max_h <= kMaxFastCellPixels;
  plan_lines(plan);
}

void plan_patch(const CropBox& box, const IntegralImage& img, int p, PatchPlan* plan) {
  const std::int64_t W = img.width(), H = img.height();
  plan->p = p;
  borders(box.x0, box.x1, p, plan->bx);
  borders(box.y0, box.y1, p, plan->by);
  const std::int64_t* bx = plan->bx;
  const std::int64_t* by = plan->by;
  bool regular = true, regular_y = true;
  for (int k = 0; k < p; ++k) {
    regular &= bx[k + 1] > bx[k];
    regular_y &= by[k + 1] > by[k];
  }
  if (regular && regular_y && bx[0] >= 0 && bx[p] <= W && by[0] >= 0 && by[p] <= H)
    return plan_interior(img, p, plan);
  std::int64_t max_w = 0, max_h = 0;
  if (regular) {
    for (int k = 0; k <= p; ++k)
      plan->col[k] = static_cast<std::int32_t>(img.column(std::clamp<std::int64_t>(bx[k], 0, W)));
    plan->nc = p + 1;
  } else {
    plan->nc = 2 * p;
  }
  int ny = 0;
  auto add_row = [&](std::int64_t y) {
    const auto row = static_cast<std::int32_t>(std::clamp<std::int64_t>(y, 0, H));
    if (ny == 0 || plan->rows[ny - 1] != row) plan->rows[ny++] = row;
    return static_cast<std::int16_t>(ny - 1);
  };
  for (int k = 0; k < p; ++k) {
    const std::int64_t xr = cell_end(bx, k), yr = cell_end(by, k);
    const std::int64_t cl = std::clamp<std::int64_t>(bx[k], 0, W),
                       cr = std::clamp<std::int64_t>(xr, 0, W);
    if (!regular) {
      plan->col[2 * k] = static_cast<std::int32_t>(img.column(cl));
      plan->col[2 * k + 1] = static_cast<std::int32_t>(img.column(cr));
    }
    plan->top[k] = add_row(by[k]);
    plan->bot[k] = add_row(yr);
    max_w = std::max(max_w, cr - cl);
    max_h = std::max<std::int64_t>(
        max_h, plan->rows[plan->bot[k]] - static_cast<std::int64_t>(plan->rows[plan->top[k]]));
    plan->inv_w[k] = 1.0f / static_cast<float>(xr - bx[k]);
    plan->inv_h[k] = 1.0f / static_cast<float>(yr - by[k]);
  }
  plan->ny = ny;
  plan_lines(plan);
  plan->regular_x = regular;
  plan->fast = max_w * max_h <= kMaxFastCellPixels;
}

// Corners gathered per block: the buffer a patch's corner loads land in (32 KiB of
// __m128i). A P = 16 patch (17 x 17 corners) is one block; bigger patches take
// several blocks of whole cell rows.
constexpr int kGatherCorners = 2048;

// The cell rows [r0, r1) whose table rows fit in the gather buffer, from r0.
inline int block_end(const PatchPlan& plan, int r0) {
  const int max_rows = kGatherCorners / plan.nc;  // >= 8: nc <= 256
  int r1 = r0 + 1;
  while (r1 < plan.p && plan.bot[r1] - plan.top[r0] + 1 <= max_rows) ++r1;
  return r1;
}

// Tables smaller than this stay in a core's L2 (1-2 MiB on current x86 servers) once
// touched: prefetching their lines only costs instructions.
constexpr std::size_t kPrefetchMinTableBytes = std::size_t{2} << 20;

// The patch to be cut after the current one, whose corner lines the current one's kernel
// prefetches a table row at a time between its cell rows: those misses then overlap the
// current patch's arithmetic instead of stalling the next patch's gather (with fresh gazes
// nearly every line of a large table is a DRAM miss).
class NextPatch {
 public:
  NextPatch() = default;  // nothing to prefetch
  NextPatch(const IntegralImage* img, const PatchPlan* plan) : img_(img), plan_(plan) {}
  // Prefetches the lines of the next `n` table rows of the next patch.
  void prefetch_rows(int n) {
    if (img_ == nullptr) return;
    const int end = std::min(plan_->ny, row_ + n);
    for (; row_ < end; ++row_) {
      const std::uint32_t* row = img_->row(plan_->rows[row_]);
      for (int j = 0; j < plan_->nl; ++j) prefetch_line(row + plan_->line[j]);
    }
  }
  void prefetch_rest() { prefetch_rows(kMaxPatchSize * 2); }

 private:
  static void prefetch_line(const std::uint32_t* p) {
#if defined(__SSE2__)
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
    __builtin_prefetch(p);
#endif
  }
  const IntegralImage* img_ = nullptr;  // not owned
  const PatchPlan* plan_ = nullptr;     // not owned
  int row_ = 0;                         // next table row (index into plan_->rows) to prefetch
};

// Portable path: any C, any P. Per block of cell rows, first each table row of the block
// is gathered straight into per-cell horizontal differences in `g` (the loads are
// independent, so many misses are in flight), then cell (r, k) = bottom row's difference
// - top row's (mod 2^32).
template <int C, bool kRegular>
void extract_generic(const IntegralImage& img, const PatchPlan& plan, float* out, NextPatch* next) {
  const int p = plan.p;
  alignas(64) std::uint32_t g[kGatherCorners][C];
  for (int r0 = 0; r0 < p;) {
    const int r1 = block_end(plan, r0);
    const int ia = plan.top[r0], ib = plan.bot[r1 - 1];
    for (int i = ia; i <= ib; ++i) {  // gather + horizontal differences
      const std::uint32_t* row = img.row(plan.rows[i]);
      std::uint32_t(*d)[C] = g + (i - ia) * p;
      for (int k = 0; k < p; ++k) {
        const std::uint32_t* left = row + plan.col[kRegular ? k : 2 * k];
        const std::uint32_t* right = row + plan.col[kRegular ? k + 1 : 2 * k + 1];
        for (int c = 0; c < C; ++c) d[k][c] = right[c] - left[c];
      }
    }
    for (int r = r0; r < r1; ++r) {
      next->prefetch_rows(1);
      const std::uint32_t(*t)[C] = g + (plan.top[r] - ia) * p;
      const std::uint32_t(*b)[C] = g + (plan.bot[r] - ia) * p;
      const float inv_h = plan.inv_h[r];
      for (int c = 0; c < C; ++c) {
        float* o = out + (c * p + r) * p;
        // Cell sums are < 2^31 on the fast path: the signed conversion is exact-rounded.
        for (int k = 0; k < p; ++k)
          o[k] = static_cast<float>(static_cast<std::int32_t>(b[k][c] - t[k][c])) *
                 (inv_h * plan.inv_w[k]);
      }
    }
    r0 = r1;
  }
  next->prefetch_rest();
}

// Whether the AVX2 cell pass runs: where the CPU has AVX2, unless SACCADE_EXTRACT_ISA=sse2
// (the tests run both passes on one machine; benchmarks compare them). Read once per process;
// extract_patches asks once per call.
bool use_avx2() {
#if defined(SACCADE_EXTRACT_AVX2)
  static const char* const isa = std::getenv("SACCADE_EXTRACT_ISA");
  static const int choice = isa == nullptr || std::strcmp(isa, "auto") == 0
                                ? (__builtin_cpu_supports("avx2") ? 1 : 0)
                            : std::strcmp(isa, "sse2") == 0 ? 0
                                                            : -1;
  if (choice < 0)
    throw std::invalid_argument(
        std::string("SACCADE_EXTRACT_ISA must be \"auto\" or \"sse2\", got \"") + isa + "\"");
  return choice == 1;
#else
  return false;
#endif
}

#if defined(__SSE2__)
// One cell row, RGB, cells [k0, p) four at a time: bottom minus top differences (mod 2^32),
// convert, 4x4 transpose to the planar output, scale by inv_h * inv_w[k].
void cells_row_sse(const __m128i* t, const __m128i* b, float inv_h_s, const float* inv_w, int k0,
                   int p, std::size_t plane, float* o) {
  const __m128 inv_h = _mm_set1_ps(inv_h_s);
  for (int k = k0; k < p; k += 4) {
    __m128 f0 = _mm_cvtepi32_ps(_mm_sub_epi32(b[k], t[k]));
    __m128 f1 = _mm_cvtepi32_ps(_mm_sub_epi32(b[k + 1], t[k + 1]));
    __m128 f2 = _mm_cvtepi32_ps(_mm_sub_epi32(b[k + 2], t[k + 2]));
    __m128 f3 = _mm_cvtepi32_ps(_mm_sub_epi32(b[k + 3], t[k + 3]));
    _MM_TRANSPOSE4_PS(f0, f1, f2, f3);  // f_c = channel c of cells k..k+3
    const __m128 scale = _mm_mul_ps(inv_h, _mm_loadu_ps(inv_w + k));
    _mm_storeu_ps(o + k, _mm_mul_ps(f0, scale));
    _mm_storeu_ps(o + plane + k, _mm_mul_ps(f1, scale));
    _mm_storeu_ps(o + 2 * plane + k, _mm_mul_ps(f2, scale));
  }
}

#if defined(SACCADE_EXTRACT_AVX2)
// Cells k and k + 1 of a cell row (RGBx each), converted.
__attribute__((target("avx2"))) inline __m256 cell_pair_avx2(const __m128i* t, const __m128i* b,
                                                             int k) {
  const __m256i bot = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + k));
  const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + k));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(bot, top));
}

// The same cell row eight cells at a time (two cells per register): half the subtracts,
// converts and multiplies of the SSE pass, and the same IEEE operations on the same
// values, so the output is identical. The rest (p % 8) goes by four.
__attribute__((target("avx2"))) void cells_row_avx2(const __m128i* t, const __m128i* b,
                                                    float inv_h_s, const float* inv_w, int p,
                                                    std::size_t plane, float* o) {
  const __m256 inv_h = _mm256_set1_ps(inv_h_s);
  // After the in-lane transpose lane 0 holds cells k, k+2, k+4, k+6 and lane 1 the odd ones.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int k = 0;
  for (; k + 8 <= p; k += 8) {
    const __m256 f0 = cell_pair_avx2(t, b, k), f1 = cell_pair_avx2(t, b, k + 2),
                 f2 = cell_pair_avx2(t, b, k + 4), f3 = cell_pair_avx2(t, b, k + 6);
    const __m256 lo01 = _mm256_unpacklo_ps(f0, f1), hi01 = _mm256_unpackhi_ps(f0, f1);
    const __m256 lo23 = _mm256_unpacklo_ps(f2, f3), hi23 = _mm256_unpackhi_ps(f2, f3);
    const __m256 red = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo01, lo23, 0x44), order);
    const __m256 green = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo01, lo23, 0xEE), order);
    const __m256 blue = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(hi01, hi23, 0x44), order);
    const __m256 scale = _mm256_mul_ps(inv_h, _mm256_loadu_ps(inv_w + k));
    _mm256_storeu_ps(o + k, _mm256_mul_ps(red, scale));
    _mm256_storeu_ps(o + plane + k, _mm256_mul_ps(green, scale));
    _mm256_storeu_ps(o + 2 * plane + k, _mm256_mul_ps(blue, scale));
  }
  if (k < p) cells_row_sse(t, b, inv_h_s, inv_w, k, p, plane, o);
}

#endif

// RGB, P % 4 == 0: one 16-byte load fetches a corner's three channels (plus one
// ignored lane; the packed layout keeps it within the corner's line). Same structure as
// extract_generic; the cell pass is cells_row_sse or, `avx2`, cells_row_avx2 (the same
// products as the generic path, so the results are identical).
template <bool kRegular>
void extract_rgb_sse(const IntegralImage& img, const PatchPlan& plan, float* out, NextPatch* next,
                     bool avx2) {
  const int p = plan.p, nc = plan.nc;
  alignas(64) __m128i g[kGatherCorners];
  const std::size_t plane = static_cast<std::size_t>(p) * p;
  for (int r0 = 0; r0 < p;) {
    const int r1 = block_end(plan, r0);
    const int ia = plan.top[r0], ib = plan.bot[r1 - 1];
    for (int i = ia; i <= ib; ++i) {  // gather + horizontal differences
      const std::uint32_t* row = img.row(plan.rows[i]);
      __m128i* d = g + (i - ia) * p;
      const auto corner = [&](int j) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + plan.col[j]));
      };
      if constexpr (kRegular) {
        __m128i left = corner(0);
        for (int j = 1; j < nc; ++j) {
          const __m128i right = corner(j);
          d[j - 1] = _mm_sub_epi32(right, left);
          left = right;
        }
      } else {
        for (int k = 0; k < p; ++k) d[k] = _mm_sub_epi32(corner(2 * k + 1), corner(2 * k));
      }
    }
    for (int r = r0; r < r1; ++r) {
      next->prefetch_rows(1);
      const __m128i* t = g + (plan.top[r] - ia) * p;
      const __m128i* b = g + (plan.bot[r] - ia) * p;
      float* o = out + static_cast<std::size_t>(r) * p;
#if defined(SACCADE_EXTRACT_AVX2)
      if (avx2) {
        cells_row_avx2(t, b, plan.inv_h[r], plan.inv_w, p, plane, o);
        continue;
      }
#endif
      cells_row_sse(t, b, plan.inv_h[r], plan.inv_w, 0, p, plane, o);
    }
    r0 = r1;
  }
  next->prefetch_rest();
}
#endif

// Cells too large for the fast path (only huge crops with small P): exact strip sums.
void extract_exact(const IntegralImage& img, const PatchPlan& plan, float* out, NextPatch* next) {
  next->prefetch_rest();
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

// Extracts the patch planned in `plan`, prefetching `next`'s lines as it goes; `avx2`: the
// RGB cell pass is cells_row_avx2 (use_avx2()).
void extract_planned(const IntegralImage& img, const PatchPlan& plan, float* out, NextPatch* next,
                     bool avx2) {
  if (!plan.fast) return extract_exact(img, plan, out, next);
  if (img.channels() == 3) {
#if defined(__SSE2__)
    if (plan.p % 4 == 0) {
      if (plan.regular_x) return extract_rgb_sse<true>(img, plan, out, next, avx2);
      return extract_rgb_sse<false>(img, plan, out, next, avx2);
    }
#endif
    if (plan.regular_x) return extract_generic<3, true>(img, plan, out, next);
    return extract_generic<3, false>(img, plan, out, next);
  }
  if (plan.regular_x) return extract_generic<1, true>(img, plan, out, next);
  return extract_generic<1, false>(img, plan, out, next);
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
  const bool avx2 = use_avx2();
  const int p = patch_size;
  const std::size_t patch_floats = static_cast<std::size_t>(images[0].channels()) * p * p;
  // Chunks of consecutive boxes: neighbouring boxes (a foveal grid) share table lines.
  constexpr int kChunk = 32;
  const int num_chunks = static_cast<int>((boxes.size() + kChunk - 1) / kChunk);
  parallel_for(num_threads, num_chunks, [&](int chunk) {
    // Plan patch i + 1 before cutting patch i, so that patch i's kernel can prefetch it.
    PatchPlan plans[2];
    const std::size_t begin = static_cast<std::size_t>(chunk) * kChunk;
    const std::size_t end = std::min(boxes.size(), begin + kChunk);
    plan_patch(boxes[begin], images[boxes[begin].image], p, &plans[0]);
    for (std::size_t i = begin; i < end; ++i) {
      const PatchPlan& plan = plans[(i - begin) & 1];
      NextPatch next;
      if (i + 1 < end) {
        PatchPlan& next_plan = plans[(i + 1 - begin) & 1];
        const IntegralImage& next_img = images[boxes[i + 1].image];
        plan_patch(boxes[i + 1], next_img, p, &next_plan);
        if (next_img.bytes() >= kPrefetchMinTableBytes) next = NextPatch(&next_img, &next_plan);
      }
      extract_planned(images[boxes[i].image], plan, out + i * patch_floats, &next, avx2);
    }
  });
}

}  // namespace saccade::kernels
