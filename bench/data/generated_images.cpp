#include "bench/data/generated_images.h"

#include <fmt/format.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <random>
#include <stdexcept>
#include <string_view>

#include "common/file_bytes.h"
#include "dataloader/image_decode.h"

namespace saccade::bench {

namespace fs = std::filesystem;

std::vector<uint8_t> generated_jpeg(int width, int height, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(0, 255);
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      image.at<cv::Vec3b>(y, x) =
          cv::Vec3b(static_cast<uint8_t>(x * 255 / width), static_cast<uint8_t>(y * 255 / height),
                    static_cast<uint8_t>((x + y) * 127 / (width + height)));
  for (int i = 0; i < 12; ++i)
    cv::circle(image, {u(rng) * width / 256, u(rng) * height / 256}, 8 + u(rng) / 4,
               cv::Scalar(u(rng), u(rng), u(rng)), cv::FILLED);
  cv::Mat noise(height, width, CV_8UC3);
  cv::randn(noise, cv::Scalar::all(0), cv::Scalar::all(6));
  image += noise;
  return data::encode_jpeg(image, 90);
}

std::vector<fs::path> write_generated_folder(const fs::path& folder, int images, int classes,
                                             int width, int height) {
  if (images < 1 || classes < 1 || width < 16 || height < 16)
    throw std::invalid_argument(fmt::format(
        "generated images: expected >= 1 image(s) of >= 16 x 16 in >= 1 class(es), got {} of "
        "{} x {} in {}",
        images, width, height, classes));
  std::vector<fs::path> paths;
  for (int i = 0; i < images; ++i) {
    const fs::path dir = folder / fmt::format("class-{:03d}", i % classes);
    if (i < classes) fs::create_directories(dir);
    const std::vector<uint8_t> jpeg = generated_jpeg(width, height, static_cast<uint64_t>(i));
    paths.push_back(dir / fmt::format("{:05d}.jpg", i));
    write_file_bytes(paths.back(),
                     std::string_view(reinterpret_cast<const char*>(jpeg.data()), jpeg.size()));
  }
  return paths;
}

}  // namespace saccade::bench
