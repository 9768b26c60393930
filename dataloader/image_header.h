// What an image file's first bytes say, read before any decoder runs: its format, and the
// size its header declares. Decoders allocate the whole image from that size before reading
// the pixels, so a few hundred bytes declaring a giant image would cost gigabytes; the
// loader refuses such a file by its header (data.max_image_pixels) instead.
#pragma once

#include <cstddef>
#include <cstdint>

namespace saccade::data {

// Whether the bytes start as a JPEG does (SOI, then a marker).
bool is_jpeg(const void* bytes, size_t size);

// Whether the bytes are one of the formats handed to OpenCV: JPEG (those TurboJPEG refuses),
// PNG, BMP, WebP, TIFF and PNM (PBM, PGM, PPM, PAM), and no file that OpenCV would hand to
// another of its decoders.
bool opencv_format(const void* bytes, size_t size);

// The size a PNG, BMP, WebP, TIFF (its first image) or PNM header declares, format being
// "PNG", "BMP", "WebP", "TIFF" or "PNM"; format null for other formats or a header that
// does not say (cut short, malformed: the decoder then refuses it itself).
struct DeclaredSize {
  const char* format = nullptr;
  int64_t width = 0, height = 0;
};
DeclaredSize declared_size(const void* bytes, size_t size);

}  // namespace saccade::data
