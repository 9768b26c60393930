#include "dataloader/translated_dataset.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <opencv2/core.hpp>

#include "dataloader/random.h"

namespace saccade::data {
namespace {

void check_fits(const cv::Mat& digit, int canvas_size, const std::string& source) {
  if (digit.cols > canvas_size || digit.rows > canvas_size) {
    throw std::invalid_argument(
        fmt::format("TranslatedDataset: canvas_size {} is smaller than the {}x{} digit '{}'",
                    canvas_size, digit.cols, digit.rows, source));
  }
}

}  // namespace

TranslatedDataset::TranslatedDataset(std::shared_ptr<const Dataset> base,
                                     TranslationOptions options)
    : base_(std::move(base)), options_(options) {
  if (!base_) throw std::invalid_argument("TranslatedDataset: base dataset is null");
  if (base_->size() <= 0) throw std::invalid_argument("TranslatedDataset: base dataset is empty");
  if (options_.canvas_size < 1) {
    throw std::invalid_argument(
        fmt::format("TranslatedDataset: canvas_size must be >= 1, got {}", options_.canvas_size));
  }
  if (options_.n_clutter < 0) {
    throw std::invalid_argument(
        fmt::format("TranslatedDataset: n_clutter must be >= 0, got {}", options_.n_clutter));
  }
  if (options_.clutter_size < 1) {
    throw std::invalid_argument(
        fmt::format("TranslatedDataset: clutter_size must be >= 1, got {}", options_.clutter_size));
  }
  // Fail at construction, not mid-training, when the canvas is too small.
  const Sample first = get_or_next_good(*base_, 0);
  check_fits(first.image, options_.canvas_size, first.source);
}

int64_t TranslatedDataset::size() const {
  return base_->size();
}
int64_t TranslatedDataset::num_classes() const {
  return base_->num_classes();
}
int TranslatedDataset::channels() const {
  return base_->channels();
}
const DatasetStats& TranslatedDataset::stats() const {
  return base_->stats();
}

std::optional<Sample> TranslatedDataset::get(int64_t index) const {
  return compose(index, nullptr);
}

std::optional<TranslationLayout> TranslatedDataset::layout(int64_t index) const {
  TranslationLayout layout;
  if (!compose(index, &layout)) return std::nullopt;
  return layout;
}

std::optional<Sample> TranslatedDataset::compose(int64_t index, TranslationLayout* layout) const {
  std::optional<Sample> digit = base_->get(index);  // throws out_of_range for a bad index
  if (!digit) return std::nullopt;
  const int canvas_size = options_.canvas_size;
  check_fits(digit->image, canvas_size, digit->source);

  SplitMix64 rng(mix_seed(options_.seed, static_cast<uint64_t>(index)));
  cv::Mat canvas = cv::Mat::zeros(canvas_size, canvas_size, digit->image.type());
  const cv::Rect digit_rect(static_cast<int>(rng.between(0, canvas_size - digit->image.cols)),
                            static_cast<int>(rng.between(0, canvas_size - digit->image.rows)),
                            digit->image.cols, digit->image.rows);
  digit->image.copyTo(canvas(digit_rect));
  if (layout) layout->digit = digit_rect;

  const int64_t n = base_->size();
  for (int k = 0; k < options_.n_clutter; ++k) {
    // "Another" digit: draw from the n - 1 indices other than this one.
    int64_t source_index = index;
    if (n > 1) {
      source_index = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - 1)));
      if (source_index >= index) ++source_index;
    }
    const Sample source = get_or_next_good(*base_, source_index);
    const int side_w = std::min({options_.clutter_size, source.image.cols, canvas_size});
    const int side_h = std::min({options_.clutter_size, source.image.rows, canvas_size});
    const cv::Rect crop(static_cast<int>(rng.between(0, source.image.cols - side_w)),
                        static_cast<int>(rng.between(0, source.image.rows - side_h)), side_w,
                        side_h);
    const cv::Rect placed(static_cast<int>(rng.between(0, canvas_size - side_w)),
                          static_cast<int>(rng.between(0, canvas_size - side_h)), side_w, side_h);
    cv::Mat target = canvas(placed);
    cv::max(target, source.image(crop), target);  // in place on the canvas ROI
    if (layout) layout->clutter.push_back({source_index, crop, placed});
  }
  return Sample{std::move(canvas), digit->label, std::move(digit->source)};
}

}  // namespace saccade::data
