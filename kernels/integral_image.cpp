#include "kernels/integral_image.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace saccade::kernels {

// Anonymous mmap, 2 MiB aligned and advised for transparent huge pages: an 8192^2
// table spans 0.8 GB, and a large patch reads corners ~100 KB apart; with 4 KiB
// pages nearly every corner read would also be a TLB miss.
struct IntegralImage::Storage {
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  void* base = nullptr;
  std::size_t mapped = 0;
  std::uint32_t* aligned = nullptr;
  std::size_t capacity = 0;  // bytes usable from `aligned`

  explicit Storage(std::size_t bytes) {
    mapped = bytes + kHugePage;
    base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    auto addr = reinterpret_cast<std::uintptr_t>(base);
    auto start = (addr + kHugePage - 1) & ~(kHugePage - 1);
    aligned = reinterpret_cast<std::uint32_t*>(start);
    capacity = mapped - (start - addr);
#ifdef MADV_HUGEPAGE
    madvise(aligned, capacity & ~(kHugePage - 1), MADV_HUGEPAGE);  // advisory; ignore failure
#endif
  }
  ~Storage() {
    munmap(base, mapped);
  }
};

namespace {

// Tables this big or bigger are written with non-temporal stores (build_strip's kStream):
// bigger than a server's L3 (32 MB on the bench host), they would not stay cached for the
// extraction that follows anyway. At 2048^2 (54 MB) streaming builds in 0.78x the time.
constexpr std::size_t kStreamingMinTableBytes = std::size_t{32} << 20;

std::string field(const char* what, const char* name) {
  return std::string(what) + "." + name;
}

// Sum of channel c over `count` interleaved C-channel pixels starting at p.
// Written as per-byte-lane accumulation over 48-byte blocks so it vectorises.
template <int C>
void channel_sums(const std::uint8_t* p, int count, std::uint32_t* sums) {
  constexpr int kBlock = 48;  // 16 pixels of 3 channels, 48 pixels of 1
  std::uint32_t lanes[kBlock] = {};
  const int bytes = count * C;
  int i = 0;
  for (; i + kBlock <= bytes; i += kBlock)
    for (int j = 0; j < kBlock; ++j) lanes[j] += p[i + j];
  for (int c = 0; c < C; ++c) sums[c] = 0;
  for (int j = 0; j < kBlock; ++j) sums[j % C] += lanes[j];
  for (; i < bytes; ++i) sums[(i % kBlock) % C] += p[i];
}

// Fills table columns (xa, xb] of every row from pixel columns [xa, xb), in a single pass
// over the table. Per row: `col` (this strip's column sums over the rows so far, L2-sized)
// takes the row's bytes (a widening add that vectorises), `left` the row's sum left of the
// strip (a vectorised byte sum, so strips are independent), then the corners are the running
// sum of `col` from `left`, assembled a 64-byte line at a time (SSE2: one vector add per RGB
// corner) and written whole. kStream: with non-temporal stores, for tables far bigger than
// the caches: a regular store first reads the line it overwrites, so the table would cross
// the memory bus twice. Corners in lines shared with a neighbouring strip (at most one at
// each end) are written one by one. RGB padding entries are 0 in whole lines.
template <int C, bool kStream>
void build_strip(const ImageView& img, std::uint32_t* table, std::ptrdiff_t stride, int xa,
                 int xb) {
  const std::size_t n = static_cast<std::size_t>(xb - xa) * C;
  std::vector<std::uint32_t> col(n + 4, 0u);  // +4: 16-byte loads read past the last pixel
  std::uint32_t left[C] = {};
  std::fill(table + column_of(xa + 1, C), table + column_of(xb, C) + C, 0u);
#if defined(__SSE2__)
  constexpr int kCornersPerLine = C == 3 ? kRgbCornersPerLine : kEntriesPerLine;
  // Whole lines [line_begin, line_end): all their corners are in (xa, xb].
  const int line_begin = (xa + kCornersPerLine) / kCornersPerLine;
  const int line_end = std::max(line_begin, (xb + 1) / kCornersPerLine);
  const int head_end = line_begin < line_end ? line_begin * kCornersPerLine - 1 : xb;
  const auto load = [](const std::uint32_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  };
  const auto put = [](std::uint32_t* p, __m128i v) {
    if constexpr (kStream)
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
    else
      _mm_store_si128(reinterpret_cast<__m128i*>(p), v);
  };
  // Lanes kept when an RGB line is assembled from five corners (see the line loop).
  const __m128i m0 = _mm_setr_epi32(-1, 0, 0, 0), m01 = _mm_setr_epi32(-1, -1, 0, 0),
                m012 = _mm_setr_epi32(-1, -1, -1, 0);
#endif
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t* src = img.data + y * img.row_stride;
    std::uint32_t row_left[C];
    channel_sums<C>(src, xa, row_left);
    for (int c = 0; c < C; ++c) left[c] += row_left[c];  // wraps mod 2^32 by design
    const std::uint8_t* px = src + static_cast<std::ptrdiff_t>(xa) * C;
    for (std::size_t i = 0; i < n; ++i) col[i] += px[i];
    std::uint32_t* out = table + (y + 1) * stride;
    if (xa == 0)
      for (int c = 0; c < C; ++c) out[c] = 0;
    const std::uint32_t* next = col.data();  // col of the next corner's pixel
    int x = xa + 1;                          // the next corner
#if defined(__SSE2__)
    // The next row's pixels of this strip, a 64-byte line per 4 table lines written (4 x 5
    // RGB corners or 4 x 16 gray ones cover >= 60 bytes of pixels): without it the column
    // pass waited on them (a third of the build at 4096^2 in a cpu-clock profile, 1.3x time).
    const std::uint8_t* pf =
        y + 1 < img.height ? src + img.row_stride + static_cast<std::ptrdiff_t>(xa) * C : nullptr;
    const std::uint8_t* const pf_end = pf != nullptr ? pf + n : nullptr;
    const auto prefetch_pixels = [&](int l) {
      if ((l & 3) == 0 && pf < pf_end) {
        _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
        pf += 64;
      }
    };
    if constexpr (C == 3) {
      __m128i s = _mm_setr_epi32(static_cast<int>(left[0]), static_cast<int>(left[1]),
                                 static_cast<int>(left[2]), 0);
      const auto corner = [&] {  // lanes 0-2: the next corner; lane 3: ignored
        s = _mm_add_epi32(s, load(next));
        next += 3;
        return s;
      };
      const auto write_one = [&](int at) {
        alignas(16) std::uint32_t v[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(v), corner());
        std::copy(v, v + 3, out + column_of(at, 3));
      };
      for (; x <= head_end; ++x) write_one(x);
      for (int l = line_begin; l < line_end; ++l, x += kCornersPerLine) {
        prefetch_pixels(l);
        const __m128i c0 = corner(), c1 = corner(), c2 = corner(), c3 = corner(), c4 = corner();
        std::uint32_t* line = out + static_cast<std::ptrdiff_t>(l) * kEntriesPerLine;
        put(line, _mm_or_si128(_mm_and_si128(c0, m012), _mm_slli_si128(c1, 12)));
        put(line + 4,
            _mm_or_si128(_mm_and_si128(_mm_srli_si128(c1, 4), m01), _mm_slli_si128(c2, 8)));
        put(line + 8,
            _mm_or_si128(_mm_and_si128(_mm_srli_si128(c2, 8), m0), _mm_slli_si128(c3, 4)));
        put(line + 12, _mm_and_si128(c4, m012));
      }
      for (; x <= xb; ++x) write_one(x);
    } else {
      std::uint32_t s = left[0];
      for (; x <= head_end; ++x) out[x] = s += *next++;
      __m128i carry = _mm_set1_epi32(static_cast<int>(s));
      for (int l = line_begin; l < line_end; ++l, x += kCornersPerLine) {
        prefetch_pixels(l);
        for (int q = 0; q < 4; ++q, next += 4) {  // a prefix sum of 4 lanes
          __m128i v = load(next);
          v = _mm_add_epi32(v, _mm_slli_si128(v, 4));
          v = _mm_add_epi32(v, _mm_slli_si128(v, 8));
          v = _mm_add_epi32(v, carry);
          carry = _mm_shuffle_epi32(v, 0xFF);
          put(out + static_cast<std::ptrdiff_t>(l) * kEntriesPerLine + 4 * q, v);
        }
      }
      s = static_cast<std::uint32_t>(_mm_cvtsi128_si32(carry));
      for (; x <= xb; ++x) out[x] = s += *next++;
    }
#else
    std::uint32_t s[C];
    for (int c = 0; c < C; ++c) s[c] = left[c];
    for (; x <= xb; ++x, next += C)
      for (int c = 0; c < C; ++c) out[column_of(x, C) + c] = s[c] += next[c];
#endif
  }
#if defined(__SSE2__)
  if constexpr (kStream) _mm_sfence();  // the streamed lines are visible when the build returns
#endif
}

}  // namespace

void validate_image(const ImageView& image, const char* what) {
  if (image.height <= 0 || image.height > kMaxImageSide)
    throw std::invalid_argument(field(what, "height") + " must be in [1, 65535], got " +
                                std::to_string(image.height));
  if (image.width <= 0 || image.width > kMaxImageSide)
    throw std::invalid_argument(field(what, "width") + " must be in [1, 65535], got " +
                                std::to_string(image.width));
  if (image.channels != 1 && image.channels != 3)
    throw std::invalid_argument(field(what, "channels") + " must be 1 or 3, got " +
                                std::to_string(image.channels));
  if (image.data == nullptr) throw std::invalid_argument(field(what, "data") + " is null");
  if (image.row_stride != 0 &&
      image.row_stride < static_cast<std::ptrdiff_t>(image.width) * image.channels)
    throw std::invalid_argument(field(what, "row_stride") + " must be 0 or >= width * channels (" +
                                std::to_string(image.width * image.channels) + "), got " +
                                std::to_string(image.row_stride));
}

IntegralImage::IntegralImage() = default;
IntegralImage::~IntegralImage() = default;
IntegralImage::IntegralImage(IntegralImage&&) noexcept = default;
IntegralImage& IntegralImage::operator=(IntegralImage&&) noexcept = default;

IntegralImage IntegralImage::build(const ImageView& image, int num_threads) {
  IntegralImage table;
  table.rebuild(image, num_threads);
  return table;
}

void IntegralImage::rebuild(const ImageView& image_in, int num_threads) {
  validate_image(image_in);
  ImageView image = image_in;
  if (image.row_stride == 0)
    image.row_stride = static_cast<std::ptrdiff_t>(image.width) * image.channels;
  const int C = image.channels;
  // Rows padded to whole 64-byte lines so every row starts line-aligned, with at least
  // one spare entry after the last corner: the SSE extractor reads a corner's 3 channels
  // as 4 lanes (for RGB the spare entry is in the same line, see column_of).
  const std::ptrdiff_t stride =
      (column_of(image.width, C) + C + 1 + kEntriesPerLine - 1) / kEntriesPerLine * kEntriesPerLine;
  const std::size_t need =
      static_cast<std::size_t>(image.height + 1) * stride * sizeof(std::uint32_t);
  if (!storage_ || storage_->capacity < need) {
    storage_.reset();
    storage_ = std::make_unique<Storage>(need);
  }
  data_ = storage_->aligned;
  height_ = image.height;
  width_ = image.width;
  channels_ = C;
  row_stride_ = stride;

  // Strips of >= 256 columns, aligned to 16 pixels: neighbouring strips share at most
  // one table line per row.
  int threads = num_threads <= 0 ? hardware_threads() : num_threads;
  threads = std::max(1, std::min(threads, (image.width + 255) / 256));
  auto bound = [&](int t) {
    if (t == threads) return image.width;
    return std::min(
        image.width,
        (static_cast<int>(static_cast<std::int64_t>(image.width) * t / threads) + 15) / 16 * 16);
  };
  std::uint32_t* table = data_;
  const bool stream = need >= kStreamingMinTableBytes;
  parallel_for(threads, threads, [&](int t) {
    const int xa = bound(t), xb = bound(t + 1);
    if (xa >= xb) return;
    if (C == 3)
      (stream ? build_strip<3, true> : build_strip<3, false>)(image, table, stride, xa, xb);
    else
      (stream ? build_strip<1, true> : build_strip<1, false>)(image, table, stride, xa, xb);
  });
  std::fill(table, table + C, 0u);  // S(0, 0)
}

std::uint64_t IntegralImage::box_sum(std::int64_t x0, std::int64_t y0, std::int64_t x1,
                                     std::int64_t y1, int c) const {
  if (c < 0 || c >= channels_)
    throw std::invalid_argument("box_sum: c must be in [0, channels), got " + std::to_string(c));
  x0 = std::clamp<std::int64_t>(x0, 0, width_);
  x1 = std::clamp<std::int64_t>(x1, 0, width_);
  y0 = std::clamp<std::int64_t>(y0, 0, height_);
  y1 = std::clamp<std::int64_t>(y1, 0, height_);
  if (x1 <= x0 || y1 <= y0) return 0;
  // Strips of at most kMaxExactBoxPixels pixels: each wrapped strip sum is exact.
  const std::int64_t rows = std::max<std::int64_t>(1, kMaxExactBoxPixels / (x1 - x0));
  std::uint64_t total = 0;
  for (std::int64_t ya = y0; ya < y1; ya += rows) {
    const std::int64_t yb = std::min(y1, ya + rows);
    const std::uint32_t* top = row(static_cast<int>(ya));
    const std::uint32_t* bottom = row(static_cast<int>(yb));
    const std::ptrdiff_t l = column(x0) + c, r = column(x1) + c;
    const std::uint32_t strip = bottom[r] - bottom[l] - top[r] + top[l];
    total += strip;
  }
  return total;
}

std::size_t IntegralImage::huge_page_bytes() const {
  if (empty()) return 0;
  // /proc/self/smaps: a header line "start-end perms ..." per mapping, then "Key: value kB"
  // lines. The table may span several mappings (madvise splits the one it came from).
  const auto lo = reinterpret_cast<std::uintptr_t>(data_);
  const std::uintptr_t hi = lo + bytes();
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  char line[512];
  bool inside = false;
  std::size_t total = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long a = 0, b = 0, kb = 0;
    char dash = 0;
    if (std::sscanf(line, "%llx%c%llx", &a, &dash, &b) == 3 && dash == '-') {
      inside = a < hi && b > lo;
    } else if (inside && std::sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) {
      total += static_cast<std::size_t>(kb) * 1024;
    }
  }
  std::fclose(f);
  return std::min(total, bytes());
}

}  // namespace saccade::kernels
