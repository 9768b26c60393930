// Image file bytes (JPEG, PNG, ... as OpenCV's imgcodecs reads them) to pixels: the one
// decoder of bytes already in memory (tar members, benchmarks).
#pragma once

#include <cstddef>
#include <string>

#include <opencv2/core/mat.hpp>

namespace saccade::data {

// `channels` 1: 8-bit gray; 3: 8-bit RGB. An empty Mat, with `reason` set, when the
// bytes are empty or do not decode, or when this build has no image codecs.
cv::Mat decode_image(const void* bytes, size_t size, int channels, std::string* reason);

}  // namespace saccade::data
