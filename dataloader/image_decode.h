// Image file bytes to pixels and back: the one decoder of bytes in memory (image
// folders, tar members, benchmarks). JPEGs go through libjpeg-turbo's TurboJPEG API
// (straight to RGB or gray, the decoder fast loaders use); PNG, BMP, WebP, TIFF and PNM, and
// JPEGs TurboJPEG refuses (CMYK, say), through OpenCV's imgcodecs when the build has them.
// Other formats are refused unread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

namespace saccade::data {

// The most pixels an image may have: OpenCV's own limit on decoding (CV_IO_MAX_IMAGE_PIXELS).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 30;

// `channels` 1: 8-bit gray; 3: 8-bit RGB. An empty Mat, with `reason` set, when the
// bytes are empty, do not decode, or hold an image of more than `max_pixels` pixels (a
// corrupt or hostile header declaring a giant image: refused from its header, before
// anything is allocated, and checked again once decoded). EXIF
// orientation is not applied (as PIL and TurboJPEG read files).
cv::Mat decode_image(const void* bytes, size_t size, int channels, int64_t max_pixels,
                     std::string* reason);

// A JPEG of `image` (8-bit gray, or RGB) at `quality` (1..100), 4:2:0 for colour.
// Throws std::runtime_error when TurboJPEG fails.
std::vector<uint8_t> encode_jpeg(const cv::Mat& image, int quality);

}  // namespace saccade::data
