#include "kernels/crop_resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/parallel.h"

namespace saccade::kernels {
namespace {

std::int64_t round_nearest(float v) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(v) + 0.5));
}

void crop_resize_one(const ImageView& img, const CropBox& box, int p, bool float_crop, float* out) {
  const int C = img.channels;
  const std::int64_t x0 = round_nearest(box.x0), y0 = round_nearest(box.y0);
  const std::int64_t x1 = std::max(round_nearest(box.x1), x0 + 1);
  const std::int64_t y1 = std::max(round_nearest(box.y1), y0 + 1);
  if ((x1 - x0) * (y1 - y0) > (std::int64_t{1} << 28))
    throw std::invalid_argument("crop_resize: crop of " + std::to_string(x1 - x0) + " x " +
                                std::to_string(y1 - y0) + " pixels is too large for the baseline");
  const int cw = static_cast<int>(x1 - x0), ch = static_cast<int>(y1 - y0);
  const int type = CV_MAKETYPE(CV_8U, C);
  const cv::Mat src(img.height, img.width, type, const_cast<std::uint8_t*>(img.data),
                    static_cast<std::size_t>(img.row_stride));
  // Intersection of the crop with the image; the rest of the crop is zero.
  const std::int64_t ix0 = std::clamp<std::int64_t>(x0, 0, img.width);
  const std::int64_t ix1 = std::clamp<std::int64_t>(x1, 0, img.width);
  const std::int64_t iy0 = std::clamp<std::int64_t>(y0, 0, img.height);
  const std::int64_t iy1 = std::clamp<std::int64_t>(y1, 0, img.height);
  cv::Mat crop;
  const bool inside = ix0 == x0 && ix1 == x1 && iy0 == y0 && iy1 == y1;
  if (inside) {
    crop = src(cv::Rect(static_cast<int>(x0), static_cast<int>(y0), cw, ch));
  } else {
    crop = cv::Mat::zeros(ch, cw, type);
    if (ix1 > ix0 && iy1 > iy0) {
      const cv::Rect from(static_cast<int>(ix0), static_cast<int>(iy0), static_cast<int>(ix1 - ix0),
                          static_cast<int>(iy1 - iy0));
      const cv::Rect to(static_cast<int>(ix0 - x0), static_cast<int>(iy0 - y0), from.width,
                        from.height);
      src(from).copyTo(crop(to));
    }
  }
  cv::Mat resized;
  if (float_crop) {
    cv::Mat f;
    crop.convertTo(f, CV_MAKETYPE(CV_32F, C));
    cv::resize(f, resized, cv::Size(p, p), 0, 0, cv::INTER_AREA);
  } else {
    cv::Mat r8;
    cv::resize(crop, r8, cv::Size(p, p), 0, 0, cv::INTER_AREA);
    r8.convertTo(resized, CV_MAKETYPE(CV_32F, C));
  }
  // HWC -> CHW
  for (int y = 0; y < p; ++y) {
    const float* row = resized.ptr<float>(y);
    for (int x = 0; x < p; ++x)
      for (int c = 0; c < C; ++c) out[(c * p + y) * p + x] = row[x * C + c];
  }
}

}  // namespace

void crop_resize_patches(std::span<const ImageView> images, std::span<const CropBox> boxes,
                         int patch_size, float* out, const CropResizeOptions& options) {
  validate_crops(boxes, static_cast<int>(images.size()), patch_size);
  std::vector<ImageView> views(images.begin(), images.end());
  for (std::size_t i = 0; i < views.size(); ++i) {
    validate_image(views[i], ("images[" + std::to_string(i) + "]").c_str());
    if (views[i].channels != views[0].channels)
      throw std::invalid_argument("images[" + std::to_string(i) +
                                  "].channels must equal images[0]'s");
    if (views[i].row_stride == 0)
      views[i].row_stride = static_cast<std::ptrdiff_t>(views[i].width) * views[i].channels;
  }
  if (boxes.empty()) return;
  if (out == nullptr) throw std::invalid_argument("out must not be null");
  const std::size_t patch_floats =
      static_cast<std::size_t>(views[0].channels) * patch_size * patch_size;
  parallel_for(options.num_threads, static_cast<int>(boxes.size()), [&](int i) {
    crop_resize_one(views[boxes[i].image], boxes[i], patch_size, options.float_crop,
                    out + i * patch_floats);
  });
}

}  // namespace saccade::kernels
