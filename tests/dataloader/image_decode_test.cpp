#include "dataloader/image_decode.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

namespace saccade::data {
namespace {

// A photo-like RGB image: gradients, a disc and noise.
cv::Mat photo(int height, int width) {
  cv::Mat rgb(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      rgb.at<cv::Vec3b>(y, x) = {static_cast<uint8_t>(x * 255 / width),
                                 static_cast<uint8_t>(y * 255 / height), 90};
  cv::circle(rgb, {width / 3, height / 2}, height / 4, cv::Scalar(200, 40, 120), cv::FILLED);
  cv::Mat noise(height, width, CV_8UC3);
  cv::randn(noise, cv::Scalar::all(0), cv::Scalar::all(8));
  return rgb + noise;
}

// TurboJPEG and OpenCV's imgcodecs run the same libjpeg-turbo decoder with the same
// defaults (accurate DCT, fancy upsampling): a JPEG decodes to the same pixels through
// either, in colour and in gray, so switching decoders does not move a single view.
TEST(ImageDecode, JpegsDecodeAsOpenCvDecodesThem) {
  const cv::Mat rgb = photo(75, 100);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> jpeg;
  ASSERT_TRUE(cv::imencode(".jpg", bgr, jpeg, {cv::IMWRITE_JPEG_QUALITY, 85}));
  std::string why;
  const cv::Mat colour = decode_image(jpeg.data(), jpeg.size(), 3, kMaxImagePixels, &why);
  ASSERT_FALSE(colour.empty()) << why;
  cv::Mat expected = cv::imdecode(jpeg, cv::IMREAD_COLOR);
  cv::cvtColor(expected, expected, cv::COLOR_BGR2RGB);
  EXPECT_EQ(cv::norm(colour, expected, cv::NORM_INF), 0);
  const cv::Mat gray = decode_image(jpeg.data(), jpeg.size(), 1, kMaxImagePixels, &why);
  ASSERT_EQ(gray.channels(), 1);
  EXPECT_EQ(cv::norm(gray, cv::imdecode(jpeg, cv::IMREAD_GRAYSCALE), cv::NORM_INF), 0);
}

TEST(ImageDecode, EncodedJpegsRoundTripCloseToTheImage) {
  const cv::Mat rgb = photo(60, 80);
  const std::vector<uint8_t> jpeg = encode_jpeg(rgb, 95);
  std::string why;
  const cv::Mat back = decode_image(jpeg.data(), jpeg.size(), 3, kMaxImagePixels, &why);
  ASSERT_FALSE(back.empty()) << why;
  ASSERT_EQ(back.size(), rgb.size());
  EXPECT_LT(cv::norm(back, rgb, cv::NORM_L1) / rgb.total() / 3, 6.0);  // grey levels, mean
  cv::Mat single;
  cv::cvtColor(rgb, single, cv::COLOR_RGB2GRAY);
  const std::vector<uint8_t> gray_jpeg = encode_jpeg(single, 95);
  EXPECT_EQ(decode_image(gray_jpeg.data(), gray_jpeg.size(), 3, kMaxImagePixels, &why).channels(),
            3);
  EXPECT_THROW(encode_jpeg(cv::Mat(), 90), std::invalid_argument);
}

// A JPEG whose header is cut is refused with TurboJPEG's reason; one cut inside its scan
// still decodes (libjpeg pads the rest, as it does for OpenCV); garbage after a JPEG's
// magic bytes and non-JPEG garbage are refused.
TEST(ImageDecode, BrokenJpegsAreRefusedOrPaddedAsLibjpegDoes) {
  const std::vector<uint8_t> jpeg = encode_jpeg(photo(64, 64), 90);
  std::string why;
  EXPECT_TRUE(decode_image(jpeg.data(), 20, 3, kMaxImagePixels, &why).empty());
  EXPECT_NE(why.find("TurboJPEG"), std::string::npos) << why;
  const cv::Mat cut = decode_image(jpeg.data(), jpeg.size() * 3 / 4, 3, kMaxImagePixels, &why);
  EXPECT_EQ(cut.rows, 64);
  const std::vector<uint8_t> fake = {0xFF, 0xD8, 0xFF, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(decode_image(fake.data(), fake.size(), 3, kMaxImagePixels, &why).empty());
  const std::string text = "not an image at all";
  EXPECT_TRUE(decode_image(text.data(), text.size(), 3, kMaxImagePixels, &why).empty());
  EXPECT_FALSE(why.empty());
}

// An image over the pixel limit (data.max_image_pixels) is refused with the limit named: a
// JPEG from its header, before anything is allocated, so that a damaged or hostile header
// declaring a giant image (a decompression bomb) costs nothing; other formats once OpenCV
// has decoded them.
TEST(ImageDecode, ImagesOverThePixelLimitAreRefusedNamingIt) {
  const cv::Mat rgb = photo(64, 48);
  const std::vector<uint8_t> jpeg = encode_jpeg(rgb, 90);
  std::string why;
  EXPECT_EQ(decode_image(jpeg.data(), jpeg.size(), 3, 64 * 48, &why).rows, 64) << why;
  EXPECT_TRUE(decode_image(jpeg.data(), jpeg.size(), 3, 64 * 48 - 1, &why).empty());
  EXPECT_NE(why.find("TurboJPEG: 48 x 64 pixels exceed the limit of 3071 (data.max_image_pixels)"),
            std::string::npos)
      << why;
  // The other formats' headers are read as well (PPM here; the rest below).
  std::vector<uint8_t> ppm;
  ASSERT_TRUE(cv::imencode(".ppm", rgb, ppm));
  EXPECT_EQ(decode_image(ppm.data(), ppm.size(), 1, 64 * 48, &why).cols, 48) << why;
  EXPECT_TRUE(decode_image(ppm.data(), ppm.size(), 1, 100, &why).empty());
  EXPECT_NE(why.find("PNM header: 48 x 64 pixels exceed the limit of 100"), std::string::npos)
      << why;

  // The same JPEG declaring 30,000 x 30,000 pixels in its frame header (SOF0: FF C0, length,
  // precision, then height and width): under OpenCV's 2^30, over the default limit. Refused
  // from the header; decoding it would have filled 2.7 GB.
  std::vector<uint8_t> bomb = jpeg;
  size_t sof = 2;
  while (sof + 9 < bomb.size() && !(bomb[sof] == 0xFF && bomb[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, bomb.size()) << "no SOF0 marker";
  for (const size_t at : {sof + 5, sof + 7}) {
    bomb[at] = 30000 >> 8;
    bomb[at + 1] = 30000 & 0xFF;
  }
  EXPECT_TRUE(decode_image(bomb.data(), bomb.size(), 3, 178956970, &why).empty());
  EXPECT_NE(why.find("30000 x 30000 pixels exceed the limit of 178956970"), std::string::npos)
      << why;
}

// OpenCV's decoders of formats no image dataset uses act on what a file declares before
// any check: they are not handed anything. A 153-byte DICOM file (the "DICM" magic at 128)
// had GDCM allocate 2.3 GB (fuzz_image); TIFF and PNM, which datasets do use, still decode.
TEST(ImageDecode, OnlyDatasetFormatsReachOpenCv) {
  std::string why;
  std::vector<uint8_t> dicom(153, 0xFF);
  std::memcpy(dicom.data() + 128, "DICM", 4);
  EXPECT_TRUE(decode_image(dicom.data(), dicom.size(), 3, kMaxImagePixels, &why).empty());
  EXPECT_EQ(why, "not a JPEG, PNG, BMP, WebP, TIFF or PNM image");
  std::memcpy(dicom.data(), "RIFF=\0\0\xbcWEBP", 12);  // OpenCV would still pick GDCM
  EXPECT_TRUE(decode_image(dicom.data(), dicom.size(), 3, kMaxImagePixels, &why).empty());
  EXPECT_EQ(why, "not a JPEG, PNG, BMP, WebP, TIFF or PNM image");
  const cv::Mat bgr = photo(20, 30);
  cv::Mat gray;
  cv::cvtColor(bgr, gray, cv::COLOR_BGR2GRAY);
  for (const char* ext : {".tiff", ".pgm", ".ppm"}) {
    std::vector<uint8_t> file;
    ASSERT_TRUE(cv::imencode(ext, std::string(ext) == ".pgm" ? gray : bgr, file)) << ext;
    EXPECT_EQ(decode_image(file.data(), file.size(), 3, kMaxImagePixels, &why).cols, 30)
        << ext << ": " << why;
  }
}

void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// PNG, BMP and WebP headers are read before OpenCV decodes (its decoders allocate the whole
// image first): one declaring more pixels than the limit is refused by its header, and the
// reason says so. Without that, each of these would have OpenCV allocate 0.8-2.7 GB.
TEST(ImageDecode, PngBmpAndWebpOverThePixelLimitAreRefusedByTheirHeader) {
  const cv::Mat bgr = photo(64, 48);
  std::string why;
  // PNG: IHDR's width and height (big-endian at 16 and 20), its CRC made right again, so
  // that libpng itself would accept the header.
  std::vector<uint8_t> png;
  ASSERT_TRUE(cv::imencode(".png", bgr, png));
  EXPECT_EQ(decode_image(png.data(), png.size(), 3, 64 * 48, &why).rows, 64) << why;
  EXPECT_TRUE(decode_image(png.data(), png.size(), 3, 64 * 48 - 1, &why).empty());
  EXPECT_NE(why.find("PNG header: 48 x 64 pixels exceed the limit of 3071"), std::string::npos)
      << why;
  put_be32(png, 16, 30000);
  put_be32(png, 20, 30000);
  put_be32(png, 29, static_cast<uint32_t>(crc32(0, png.data() + 12, 17)));
  EXPECT_TRUE(decode_image(png.data(), png.size(), 3, 178956970, &why).empty());
  EXPECT_NE(why.find("PNG header: 30000 x 30000 pixels exceed the limit of 178956970"),
            std::string::npos)
      << why;
  // The largest sizes a header holds: their product is past int64 (fuzz_image found it).
  put_be32(png, 16, 0xFFFFFFFF);
  put_be32(png, 20, 0xFFFFFFFF);
  EXPECT_TRUE(decode_image(png.data(), png.size(), 3, 178956970, &why).empty());
  EXPECT_NE(why.find("PNG header: 4294967295 x 4294967295 pixels exceed"), std::string::npos)
      << why;

  // BMP: signed little-endian width and height at 18 and 22 (negative: rows top-down).
  std::vector<uint8_t> bmp;
  ASSERT_TRUE(cv::imencode(".bmp", bgr, bmp));
  EXPECT_EQ(decode_image(bmp.data(), bmp.size(), 3, 64 * 48, &why).cols, 48) << why;
  const int32_t size[] = {30000, -30000};
  std::memcpy(bmp.data() + 18, size, sizeof size);
  EXPECT_TRUE(decode_image(bmp.data(), bmp.size(), 3, 178956970, &why).empty());
  EXPECT_NE(why.find("BMP header: 30000 x 30000 pixels exceed"), std::string::npos) << why;

  // WebP, lossy (VP8: 14-bit sizes at 26 and 28) and lossless (VP8L: 14-bit sizes less one
  // from bit 0 of byte 21): the largest they can declare, 16,383 (16,384) squared.
  for (const int quality : {90, 101}) {
    std::vector<uint8_t> webp;
    ASSERT_TRUE(cv::imencode(".webp", bgr, webp, {cv::IMWRITE_WEBP_QUALITY, quality}));
    EXPECT_EQ(decode_image(webp.data(), webp.size(), 3, 64 * 48, &why).rows, 64) << why;
    EXPECT_TRUE(decode_image(webp.data(), webp.size(), 3, 64 * 48 - 1, &why).empty());
    EXPECT_NE(why.find("WebP header: 48 x 64 pixels exceed"), std::string::npos) << why;
    if (quality > 100) {
      ASSERT_EQ(std::string(webp.begin() + 12, webp.begin() + 16), "VP8L");
      uint32_t bits = 0;
      std::memcpy(&bits, webp.data() + 21, 4);  // little-endian, as this machine
      bits = (bits & ~((1u << 28) - 1)) | 16383 | 16383u << 14;
      std::memcpy(webp.data() + 21, &bits, 4);
    } else {
      ASSERT_EQ(std::string(webp.begin() + 12, webp.begin() + 16), "VP8 ");
      webp[26] = webp[28] = 0xFF;
      webp[27] = webp[29] = 0x3F;
    }
    EXPECT_TRUE(decode_image(webp.data(), webp.size(), 3, 178956970, &why).empty());
    EXPECT_NE(why.find("WebP header: 16"), std::string::npos) << why;
  }
}

// A TIFF of one image file directory holding only ImageWidth and ImageLength, in either
// byte order, classic (SHORT or LONG values) or BigTIFF (LONG8).
std::vector<uint8_t> tiff_header(bool little, bool big_tiff, uint16_t type, uint64_t width,
                                 uint64_t height) {
  std::vector<uint8_t> b;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      b.push_back(static_cast<uint8_t>(v >> 8 * (little ? i : bytes - 1 - i)));
  };
  b.push_back(little ? 'I' : 'M');
  b.push_back(little ? 'I' : 'M');
  put(big_tiff ? 43 : 42, 2);
  if (big_tiff)
    put(8, 2), put(0, 2), put(16, 8);  // offset size, reserved, first IFD
  else
    put(8, 4);
  const int value_bytes = big_tiff ? 8 : 4, type_bytes = type == 3 ? 2 : type == 4 ? 4 : 8;
  put(2, big_tiff ? 8 : 2);
  for (const auto& [tag, value] : {std::pair<uint16_t, uint64_t>{256, width}, {257, height}}) {
    put(tag, 2);
    put(type, 2);
    put(1, value_bytes);
    put(value, type_bytes);  // first in the value field, padded after
    for (int i = type_bytes; i < value_bytes; ++i) b.push_back(0);
  }
  put(0, value_bytes);  // no next directory
  return b;
}

// TIFF and PNM headers are read before OpenCV decodes too (OpenCV's own limit,
// OPENCV_IO_MAX_IMAGE_PIXELS, lets 2^30 pixels through: 3 GB of RGB).
TEST(ImageDecode, TiffAndPnmOverThePixelLimitAreRefusedByTheirHeader) {
  const cv::Mat bgr = photo(64, 48);
  std::string why;
  for (const std::string ext : {".tiff", ".ppm", ".pgm", ".pam"}) {
    SCOPED_TRACE(ext);
    std::vector<uint8_t> file;
    cv::Mat image = bgr;
    if (ext == ".pgm") cv::cvtColor(bgr, image, cv::COLOR_BGR2GRAY);
    ASSERT_TRUE(cv::imencode(ext, image, file));
    EXPECT_EQ(decode_image(file.data(), file.size(), 3, 64 * 48, &why).rows, 64) << why;
    EXPECT_TRUE(decode_image(file.data(), file.size(), 3, 64 * 48 - 1, &why).empty());
    const std::string format = ext == ".tiff" ? "TIFF" : "PNM";
    EXPECT_NE(why.find(format + " header: 48 x 64 pixels exceed the limit of 3071"),
              std::string::npos)
        << why;
  }
  for (const bool little : {true, false}) {
    for (const auto& [big_tiff, type] : {std::pair{false, 3}, {false, 4}, {true, 16}}) {
      SCOPED_TRACE(testing::Message() << little << big_tiff << type);
      const auto tiff = tiff_header(little, big_tiff, static_cast<uint16_t>(type), 30000, 20000);
      EXPECT_TRUE(decode_image(tiff.data(), tiff.size(), 3, 178956970, &why).empty());
      EXPECT_NE(why.find("TIFF header: 30000 x 20000 pixels exceed"), std::string::npos) << why;
    }
  }
  const auto huge = tiff_header(true, true, 16, uint64_t{1} << 63, 2);
  EXPECT_TRUE(decode_image(huge.data(), huge.size(), 3, 178956970, &why).empty());
  EXPECT_NE(why.find("TIFF header: 9223372036854775807 x 2 pixels exceed"), std::string::npos)
      << why;
  for (const std::string pnm :
       {"P6\n# a comment\n30000 # another\n20000\n255\n", "P5 30000 20000 255 ",
        "P7\nWIDTH 30000\nHEIGHT 20000\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n",
        "P4\n300000000000000000000000 20000\n"}) {
    SCOPED_TRACE(pnm);
    const std::string file = pnm + std::string(64, '\x7f');
    EXPECT_TRUE(decode_image(file.data(), file.size(), 3, 178956970, &why).empty());
    EXPECT_NE(why.find("PNM header: "), std::string::npos) << why;
    EXPECT_NE(why.find(" x 20000 pixels exceed"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace saccade::data
