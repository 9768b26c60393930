#include "dataloader/image_decode.h"

#include <opencv2/imgproc.hpp>
#if SACCADE_HAS_IMAGE_CODECS
#include <opencv2/imgcodecs.hpp>
#endif

namespace saccade::data {

cv::Mat decode_image(const void* bytes, size_t size, int channels, std::string* reason) {
  if (size == 0) {
    *reason = "empty member";
    return {};
  }
  cv::Mat image;
#if SACCADE_HAS_IMAGE_CODECS
  try {
    // imdecode only reads the buffer; the Mat header just wraps it.
    const cv::Mat buffer(1, static_cast<int>(size), CV_8U, const_cast<void*>(bytes));
    image = cv::imdecode(buffer, channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {  // e.g. an image over OpenCV's pixel limit
    *reason = std::string("OpenCV: ") + e.what();
    return {};
  }
#endif
  if (image.empty()) {
    *reason = SACCADE_HAS_IMAGE_CODECS
                  ? "not a decodable image"
                  : "this build has no image codecs (SACCADE_IMAGE_CODECS=OFF)";
    return {};
  }
  if (channels == 3) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

}  // namespace saccade::data
