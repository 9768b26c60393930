#include "dataloader/resized_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <opencv2/imgproc.hpp>

namespace saccade::data {

ResizedDataset::ResizedDataset(std::shared_ptr<const Dataset> base, double scale, bool bilinear)
    : base_(std::move(base)), scale_(scale), bilinear_(bilinear) {
  if (!base_) throw std::invalid_argument("ResizedDataset: base dataset is null");
  if (!(scale_ > 0))
    throw std::invalid_argument(fmt::format("ResizedDataset: scale must be > 0, got {}", scale_));
}

std::optional<Sample> ResizedDataset::get(int64_t index) const {
  std::optional<Sample> s = base_->get(index);
  if (!s || scale_ == 1.0) return s;
  const int w = std::max(1, static_cast<int>(std::lround(s->image.cols * scale_)));
  const int h = std::max(1, static_cast<int>(std::lround(s->image.rows * scale_)));
  cv::Mat resized;
  cv::resize(s->image, resized, cv::Size(w, h), 0, 0,
             scale_ < 1.0 ? cv::INTER_AREA : (bilinear_ ? cv::INTER_LINEAR : cv::INTER_NEAREST));
  s->image = resized;
  s->source += fmt::format(" x{}", scale_);
  return s;
}

}  // namespace saccade::data
