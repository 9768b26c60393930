#include "dataloader/image_decode.h"

#include <turbojpeg.h>

#include <memory>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#if SACCADE_HAS_IMAGE_CODECS
#include <opencv2/imgcodecs.hpp>
#endif

#include "dataloader/image_header.h"

namespace saccade::data {
namespace {

// A TurboJPEG handle per thread: a handle is not thread-safe, and making one allocates.
tjhandle thread_handle(bool decompress) {
  using Handle = std::unique_ptr<void, int (*)(tjhandle)>;
  thread_local Handle decompressor(nullptr, tjDestroy), compressor(nullptr, tjDestroy);
  Handle& h = decompress ? decompressor : compressor;
  if (!h) h.reset(decompress ? tjInitDecompress() : tjInitCompress());
  if (!h) throw std::runtime_error(std::string("TurboJPEG: ") + tjGetErrorStr2(nullptr));
  return h.get();
}

// "W x H pixels exceed the limit of N" when they do, else "".
std::string over_limit(int64_t width, int64_t height, int64_t max_pixels) {
  // Divided, not multiplied: a header's sizes reach 2^32 - 1 each. A size of 0 or less is
  // no giant image (the decoder refuses it).
  if (width <= 0 || height <= 0 || height <= max_pixels / width) return "";
  return std::to_string(width) + " x " + std::to_string(height) + " pixels exceed the limit of " +
         std::to_string(max_pixels) + " (data.max_image_pixels)";
}

// The JPEG decoded by TurboJPEG, or an empty Mat with `reason` set; `too_large` says that
// its header declared more than `max_pixels` pixels (then nothing was allocated, and no
// other decoder should try). A warning (a truncated scan, say) still gives the image, as
// libjpeg's default does for OpenCV.
cv::Mat decode_jpeg(const void* bytes, size_t size, int channels, int64_t max_pixels,
                    std::string* reason, bool* too_large) {
  tjhandle h = thread_handle(true);
  const auto* jpeg = static_cast<const unsigned char*>(bytes);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(h, jpeg, static_cast<unsigned long>(size), &width, &height, &subsampling,
                          &colorspace) != 0) {
    *reason = std::string("TurboJPEG: ") + tjGetErrorStr2(h);
    return {};
  }
  if (const std::string over = over_limit(width, height, max_pixels); !over.empty()) {
    *reason = "TurboJPEG: " + over;
    *too_large = true;
    return {};
  }
  cv::Mat image(height, width, channels == 1 ? CV_8UC1 : CV_8UC3);
  if (tjDecompress2(h, jpeg, static_cast<unsigned long>(size), image.data, width,
                    static_cast<int>(image.step), height, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                    0) != 0 &&
      tjGetErrorCode(h) != TJERR_WARNING) {
    *reason = std::string("TurboJPEG: ") + tjGetErrorStr2(h);
    return {};
  }
  return image;
}

}  // namespace

cv::Mat decode_image(const void* bytes, size_t size, int channels, int64_t max_pixels,
                     std::string* reason) {
  if (size == 0) {
    *reason = "empty member";
    return {};
  }
  std::string turbojpeg;  // why TurboJPEG refused a JPEG that OpenCV then tries
  if (is_jpeg(bytes, size)) {
    bool too_large = false;
    cv::Mat image = decode_jpeg(bytes, size, channels, max_pixels, &turbojpeg, &too_large);
    if (!image.empty()) return image;
    if (!SACCADE_HAS_IMAGE_CODECS || too_large) {
      *reason = turbojpeg;
      return image;
    }
  }
  if (!opencv_format(bytes, size)) {
    *reason = "not a JPEG, PNG, BMP, WebP, TIFF or PNM image";
    return {};
  }
  if (const DeclaredSize d = declared_size(bytes, size); d.format != nullptr) {
    if (const std::string over = over_limit(d.width, d.height, max_pixels); !over.empty()) {
      *reason = std::string(d.format) + " header: " + over;
      return {};
    }
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
    *reason = !turbojpeg.empty()         ? turbojpeg + "; OpenCV cannot decode it either"
              : SACCADE_HAS_IMAGE_CODECS ? "not a decodable image"
                                         : "not a JPEG, and this build has no other image "
                                           "codecs (SACCADE_IMAGE_CODECS=OFF)";
    return {};
  }
  if (const std::string over = over_limit(image.cols, image.rows, max_pixels); !over.empty()) {
    *reason = "OpenCV: " + over;
    return {};
  }
  if (channels == 3) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

std::vector<uint8_t> encode_jpeg(const cv::Mat& image, int quality) {
  if (image.empty() || image.depth() != CV_8U || (image.channels() != 1 && image.channels() != 3))
    throw std::invalid_argument("encode_jpeg: expected a non-empty 8-bit gray or RGB image");
  tjhandle h = thread_handle(false);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const bool gray = image.channels() == 1;
  if (tjCompress2(h, image.data, image.cols, static_cast<int>(image.step), image.rows,
                  gray ? TJPF_GRAY : TJPF_RGB, &jpeg, &size, gray ? TJSAMP_GRAY : TJSAMP_420,
                  quality, 0) != 0) {
    tjFree(jpeg);
    throw std::runtime_error(std::string("TurboJPEG: ") + tjGetErrorStr2(h));
  }
  std::vector<uint8_t> out(jpeg, jpeg + size);
  tjFree(jpeg);
  return out;
}

}  // namespace saccade::data
