// An image member of a shard or a file of an image folder: data::decode_image gives the
// image with the channels asked for, or nothing and a reason (the loader then skips and
// counts it), whatever the bytes: JPEGs through TurboJPEG, the rest through OpenCV. The limit
// is 2^20 pixels: the fuzzer's memory limit (-rss_limit_mb) then stands for "a header
// declaring a giant image allocates nothing" (OpenCV's formats: OPENCV_IO_MAX_IMAGE_PIXELS,
// which scripts/fuzz.sh sets to the same).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dataloader/image_decode.h"

constexpr int64_t kMaxPixels = int64_t{1} << 20;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const int channels : {3, 1}) {
    std::string reason;
    const cv::Mat image = saccade::data::decode_image(data, size, channels, kMaxPixels, &reason);
    if (image.empty() ? reason.empty()
                      : image.depth() != CV_8U || image.channels() != channels || image.dims != 2 ||
                            image.total() > kMaxPixels)
      std::abort();
  }
  return 0;
}
