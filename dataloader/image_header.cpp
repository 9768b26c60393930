#include "dataloader/image_header.h"

#include <cctype>
#include <cstring>
#include <string_view>

namespace saccade::data {
namespace {

// Whether `magic` (a C string) is at offset `at` of the file.
bool has_at(const unsigned char* b, size_t size, const char* magic, size_t at = 0) {
  const size_t n = std::strlen(magic);
  return size >= at + n && std::memcmp(b + at, magic, n) == 0;
}

// The unsigned integer of `bytes` bytes at `b`, little- or big-endian.
uint64_t read_uint(const unsigned char* b, int bytes, bool little = true) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | b[little ? bytes - 1 - i : i];
  return v;
}

bool is_tiff(const unsigned char* b, size_t size) {
  return size >= 4 && ((b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) &&
                        b[3] == 0) ||  // little-endian TIFF, BigTIFF
                       (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43)));
}

// TIFF (Adobe's TIFF 6.0, section 2; BigTIFF: 8-byte offsets and counts): the ImageWidth
// (256) and ImageLength (257) entries of the first image file directory.
DeclaredSize tiff_size(const unsigned char* b, size_t size) {
  const bool little = b[0] == 'I', big_tiff = read_uint(b + 2, 2, little) == 43;
  const int offset_bytes = big_tiff ? 8 : 4, entry_bytes = big_tiff ? 20 : 12;
  const size_t first = big_tiff ? 8 : 4;
  if (size < first + offset_bytes) return {};
  const uint64_t ifd = read_uint(b + first, offset_bytes, little);
  const int count_bytes = big_tiff ? 8 : 2;
  if (ifd > size || size - ifd < static_cast<uint64_t>(count_bytes)) return {};
  const uint64_t entries = read_uint(b + ifd, count_bytes, little);
  int64_t width = -1, height = -1;
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t at = ifd + count_bytes + i * entry_bytes;
    if (at > size || size - at < static_cast<uint64_t>(entry_bytes)) break;  // cut short
    const uint64_t tag = read_uint(b + at, 2, little), type = read_uint(b + at + 2, 2, little);
    if (tag != 256 && tag != 257) continue;
    const unsigned char* value = b + at + 4 + offset_bytes;  // after tag, type and count
    // SHORT (3), LONG (4) and LONG8 (16) values sit in the entry, first in its value field.
    const int value_bytes = type == 3 ? 2 : type == 4 ? 4 : type == 16 && big_tiff ? 8 : 0;
    if (value_bytes == 0) return {};
    const uint64_t v = read_uint(value, value_bytes, little);
    // Past int64 is past any limit: kept as the largest int64 for the message.
    (tag == 256 ? width : height) =
        v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
  }
  if (width < 0 || height < 0) return {};
  return {"TIFF", width, height};
}

// PNM (the Netpbm formats): "P1".."P6", then the width and the height as decimal text,
// whitespace and '#' comments between; PAM ("P7"): "WIDTH n" and "HEIGHT n" header lines
// before "ENDHDR".
DeclaredSize pnm_size(const unsigned char* b, size_t size) {
  size_t at = 2;
  auto token = [&]() -> std::string_view {  // the next token, or "" at the end of the bytes
    while (at < size) {
      if (b[at] == '#') {
        while (at < size && b[at] != '\n') ++at;
      } else if (std::isspace(b[at])) {
        ++at;
      } else {
        break;
      }
    }
    const size_t begin = at;
    while (at < size && !std::isspace(b[at]) && b[at] != '#') ++at;
    return {reinterpret_cast<const char*>(b + begin), at - begin};
  };
  auto number = [&](int64_t* out) {  // a decimal token; past 18 digits as the largest int64
    const std::string_view t = token();
    if (t.empty()) return false;
    int64_t v = 0;
    for (const char c : t) {
      if (c < '0' || c > '9') return false;
      v = v > (INT64_MAX - 9) / 10 ? INT64_MAX : v * 10 + (c - '0');
    }
    *out = v;
    return true;
  };
  int64_t width = -1, height = -1;
  if (b[1] != '7') {
    if (!number(&width) || !number(&height)) return {};
    return {"PNM", width, height};
  }
  for (std::string_view t = token(); !t.empty() && t != "ENDHDR"; t = token()) {
    if (t == "WIDTH" && !number(&width)) return {};
    if (t == "HEIGHT" && !number(&height)) return {};
  }
  if (width < 0 || height < 0) return {};
  return {"PNM", width, height};
}

bool is_pnm(const unsigned char* b, size_t size) {
  return size >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' && std::isspace(b[2]);
}

}  // namespace

bool is_jpeg(const void* bytes, size_t size) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  return size >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

// OpenCV's other decoders go unused by image datasets and act on what a file declares before
// any check of ours: a 153-byte "DICOM" file had GDCM allocate 2.3 GB, or fail an assertion
// (fuzz_image). OpenCV picks a decoder by the first signature that matches, and DICOM's is at
// offset 128, so a file with it is refused whatever its first bytes say.
bool opencv_format(const void* bytes, size_t size) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  if (has_at(b, size, "DICM", 128)) return false;
  return is_jpeg(b, size) || has_at(b, size, "\x89PNG\r\n\x1a\n") || has_at(b, size, "BM") ||
         (has_at(b, size, "RIFF") && has_at(b, size, "WEBP", 8)) || is_tiff(b, size) ||
         is_pnm(b, size);
}

DeclaredSize declared_size(const void* bytes, size_t size) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  auto starts = [&](const char* magic, size_t at = 0) { return has_at(b, size, magic, at); };
  // PNG: the signature, then the IHDR chunk (length, type, big-endian width and height).
  if (starts("\x89PNG\r\n\x1a\n") && starts("IHDR", 12) && size >= 24)
    return {"PNG", static_cast<int64_t>(read_uint(b + 16, 4, false)),
            static_cast<int64_t>(read_uint(b + 20, 4, false))};
  // BMP: the file header, then the DIB header (its size says which: 12 is OS/2's, 16-bit
  // sizes; the others have signed 32-bit ones, a negative height meaning top-down rows).
  if (starts("BM") && size >= 26) {
    if (read_uint(b + 14, 4) == 12)
      return {"BMP", static_cast<int64_t>(read_uint(b + 18, 2)),
              static_cast<int64_t>(read_uint(b + 20, 2))};
    const auto height = static_cast<int32_t>(read_uint(b + 22, 4));
    return {"BMP", static_cast<int32_t>(read_uint(b + 18, 4)),
            height < 0 ? -static_cast<int64_t>(height) : height};
  }
  // WebP (RIFF container, Google's "WebP Container Specification"): the first chunk says.
  if (starts("RIFF") && starts("WEBP", 8) && size >= 30) {
    if (starts("VP8X", 12))
      return {"WebP", static_cast<int64_t>(read_uint(b + 24, 3)) + 1,
              static_cast<int64_t>(read_uint(b + 27, 3)) + 1};
    if (starts("VP8L", 12) && b[20] == 0x2f) {
      const uint64_t bits = read_uint(b + 21, 4);
      return {"WebP", static_cast<int64_t>(bits & 0x3fff) + 1,
              static_cast<int64_t>(bits >> 14 & 0x3fff) + 1};
    }
    if (starts("VP8 ", 12) && b[23] == 0x9d && b[24] == 0x01 && b[25] == 0x2a)
      return {"WebP", static_cast<int64_t>(read_uint(b + 26, 2) & 0x3fff),
              static_cast<int64_t>(read_uint(b + 28, 2) & 0x3fff)};
  }
  if (is_tiff(b, size)) return tiff_size(b, size);
  if (is_pnm(b, size)) return pnm_size(b, size);
  return {};
}

}  // namespace saccade::data
