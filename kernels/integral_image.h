// Summed-area table of an 8-bit image: the one-time step that makes every later
// crop-and-resize O(P^2) regardless of the crop's size in pixels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace saccade::kernels {

// A decoded 8-bit image, HWC interleaved (OpenCV's layout; RGB or BGR passes through
// unchanged). Non-owning: the caller keeps `data` alive for the duration of a call.
struct ImageView {
  const std::uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 0;               // 1 or 3
  std::ptrdiff_t row_stride = 0;  // bytes between rows; 0 means width * channels
};

// Largest accepted side. Keeps every pixel coordinate and every row sum far from
// overflow (a row of 65535 pixels sums to < 2^24, and 65535^2 * 255 < 2^40).
inline constexpr int kMaxImageSide = 65535;

// Throws std::invalid_argument naming the offending field (`what` prefixes it).
void validate_image(const ImageView& image, const char* what = "image");

// Corners (x, y) of an RGB table packed per 64-byte line: 5 corners x 3 channels x 4
// bytes = 60 bytes, then 4 bytes of padding, so that no corner ever straddles two cache
// lines (12-byte corners packed back to back straddle one time in six) and the 16-byte
// load of a corner's 3 channels (plus one ignored lane) stays within its line: the 5th
// corner starts at byte 48. Costs 1/15 more memory.
inline constexpr int kRgbCornersPerLine = 5;
inline constexpr int kEntriesPerLine = 16;  // uint32 entries per 64-byte line

// Entry offset of table column x (x in [0, width]) within a table row, for a table of
// `channels` channels: channel c of corner x is at row(y)[column_of(x, channels) + c].
constexpr std::ptrdiff_t column_of(std::ptrdiff_t x, int channels) {
  return channels == 3 ? x / kRgbCornersPerLine * kEntriesPerLine + x % kRgbCornersPerLine * 3
                       : x * channels;
}

// The table S of an image: S(x, y, c) = sum of pixels [0, x) x [0, y) of channel c,
// stored as (height + 1) rows of (width + 1) corners, channels interleaved so that one
// corner read fetches all channels from one cache line (see kRgbCornersPerLine; a row
// starts on a line and corner x sits at entry column(x) of its row).
//
// Representation: uint32 with wrapping (mod 2^32) arithmetic. The table itself
// overflows on images above ~16.8 MP per channel, but a box sum
//   S(x1,y1) - S(x0,y1) - S(x1,y0) + S(x0,y0)  (mod 2^32)
// equals the true box sum whenever that sum is below 2^32, i.e. for any box of at
// most 16,843,009 pixels (2^32 / 255): every cell of a P >= 2 patch of an 8192^2
// image, and every box of a 4096^2 one. Bigger boxes are summed exactly as strips
// (box_sum below). Why not int64 or fp64: same exactness for twice the memory and
// twice the cache lines per corner (8192^2 RGB: 0.8 GB as uint32, 1.6 GB as int64);
// fp32 is exact only up to 2^24 (a 256 x 256 white image).
class IntegralImage {
 public:
  // A box this many pixels or smaller sums exactly with one wrapped 4-corner read.
  static constexpr std::int64_t kMaxExactBoxPixels = 16843009;  // floor(2^32 / 255)

  IntegralImage();
  ~IntegralImage();
  IntegralImage(IntegralImage&&) noexcept;
  IntegralImage& operator=(IntegralImage&&) noexcept;
  IntegralImage(const IntegralImage&) = delete;
  IntegralImage& operator=(const IntegralImage&) = delete;

  // Builds the table of `image` with `num_threads` threads (0 = all hardware threads).
  static IntegralImage build(const ImageView& image, int num_threads = 1);
  // Rebuilds in place, reusing the storage when it is large enough (no page faults).
  void rebuild(const ImageView& image, int num_threads = 1);

  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return channels_; }
  bool empty() const { return height_ == 0; }
  // Entries between consecutive table rows (>= column(width) + channels, whole lines).
  std::ptrdiff_t row_stride() const { return row_stride_; }
  // Table row y in [0, height]; row 0 and column 0 are zero.
  const std::uint32_t* row(int y) const { return data_ + y * row_stride_; }
  // Entry offset of corner column x in [0, width] within a row (column_of above).
  std::ptrdiff_t column(std::ptrdiff_t x) const { return column_of(x, channels_); }
  // S(x, y, c), wrapped mod 2^32.
  std::uint32_t at(int x, int y, int c) const { return row(y)[column(x) + c]; }
  std::size_t bytes() const { return static_cast<std::size_t>(height_ + 1) * row_stride_ * 4; }
  // Bytes of the table currently backed by transparent huge pages (AnonHugePages of the
  // mappings holding it, from /proc/self/smaps; at most bytes()). 0 when unknown.
  std::size_t huge_page_bytes() const;

  // Exact sum of channel c over pixels [x0, x1) x [y0, y1); the box is clipped to the
  // image (outside pixels are zero). Any box size: big boxes are split into strips.
  std::uint64_t box_sum(std::int64_t x0, std::int64_t y0, std::int64_t x1, std::int64_t y1,
                        int c) const;

 private:
  struct Storage;                     // huge-page-backed buffer, reused across rebuilds
  std::unique_ptr<Storage> storage_;  // owned
  std::uint32_t* data_ = nullptr;     // points into storage_
  int height_ = 0;
  int width_ = 0;
  int channels_ = 0;
  std::ptrdiff_t row_stride_ = 0;
};

}  // namespace saccade::kernels
