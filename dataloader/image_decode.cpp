#include "dataloader/image_decode.h"

#include <turbojpeg.h>

#include <cctype>
#include <cstring>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#if SACCADE_HAS_IMAGE_CODECS
#include <opencv2/imgcodecs.hpp>
#endif

namespace saccade::data {
namespace {

bool is_jpeg(const void* bytes, size_t size) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  return size >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

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

// Whether `magic` (a C string) is at offset `at` of the file.
bool has_at(const unsigned char* b, size_t size, const char* magic, size_t at = 0) {
  const size_t n = std::strlen(magic);
  return size >= at + n && std::memcmp(b + at, magic, n) == 0;
}

// The formats handed to OpenCV: JPEG (those TurboJPEG refuses), PNG, BMP, WebP, TIFF and
// PNM (PBM, PGM, PPM, PAM). Its other decoders go unused by image datasets and act on what
// a file declares before any check of ours: a 153-byte "DICOM" file had GDCM allocate
// 2.3 GB, or fail an assertion (fuzz_image). OpenCV picks a decoder by the first signature
// that matches, and DICOM's is at offset 128, so a file with it is refused whatever its
// first bytes say.
bool opencv_format(const unsigned char* b, size_t size) {
  if (has_at(b, size, "DICM", 128)) return false;
  const bool tiff =
      size >= 4 &&
      ((b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) &&
        b[3] == 0) ||  // little-endian TIFF, BigTIFF
       (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43)));  // big-endian
  return is_jpeg(b, size) || has_at(b, size, "\x89PNG\r\n\x1a\n") || has_at(b, size, "BM") ||
         (has_at(b, size, "RIFF") && has_at(b, size, "WEBP", 8)) || tiff ||
         (size >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' && std::isspace(b[2]));
}

// The little-endian unsigned integer in `bytes` bytes at `b`.
uint32_t le(const unsigned char* b, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | b[i];
  return v;
}

// The size a PNG, BMP or WebP header declares, as {format, width, height}; {} for other
// formats or a header too short to say. Read before OpenCV decodes: its decoders allocate
// the whole image first, so a few hundred bytes declaring a giant one would cost gigabytes.
struct DeclaredSize {
  const char* format = nullptr;
  int64_t width = 0, height = 0;
};
DeclaredSize declared_size(const void* bytes, size_t size) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  auto starts = [&](const char* magic, size_t at = 0) { return has_at(b, size, magic, at); };
  // PNG: the signature, then the IHDR chunk (length, type, big-endian width and height).
  if (starts("\x89PNG\r\n\x1a\n") && starts("IHDR", 12) && size >= 24)
    return {"PNG", __builtin_bswap32(le(b + 16, 4)), __builtin_bswap32(le(b + 20, 4))};
  // BMP: the file header, then the DIB header (its size says which: 12 is OS/2's, 16-bit
  // sizes; the others have signed 32-bit ones, a negative height meaning top-down rows).
  if (starts("BM") && size >= 26) {
    if (le(b + 14, 4) == 12) return {"BMP", le(b + 18, 2), le(b + 20, 2)};
    const auto height = static_cast<int32_t>(le(b + 22, 4));
    return {"BMP", static_cast<int32_t>(le(b + 18, 4)),
            height < 0 ? -static_cast<int64_t>(height) : height};
  }
  // WebP (RIFF container, Google's "WebP Container Specification"): the first chunk says.
  if (starts("RIFF") && starts("WEBP", 8) && size >= 30) {
    if (starts("VP8X", 12)) return {"WebP", le(b + 24, 3) + 1, le(b + 27, 3) + 1};
    if (starts("VP8L", 12) && b[20] == 0x2f) {
      const uint32_t bits = le(b + 21, 4);
      return {"WebP", (bits & 0x3fff) + 1, (bits >> 14 & 0x3fff) + 1};
    }
    if (starts("VP8 ", 12) && b[23] == 0x9d && b[24] == 0x01 && b[25] == 0x2a)
      return {"WebP", le(b + 26, 2) & 0x3fff, le(b + 28, 2) & 0x3fff};
  }
  return {};
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
  if (!opencv_format(static_cast<const unsigned char*>(bytes), size)) {
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
