// Generated images and small views for the data plane tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "tests/dataloader/small_views.h"

namespace saccade::data_plane::testing {

// Random images of varying size; `corrupt` indices decode to nothing.
class GeneratedDataset : public data::Dataset {
 public:
  explicit GeneratedDataset(int64_t n, std::vector<int64_t> corrupt = {})
      : n_(n), corrupt_(std::move(corrupt)) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 10; }
  int channels() const override { return 3; }
  std::optional<data::Sample> get(int64_t i) const override {
    if (std::find(corrupt_.begin(), corrupt_.end(), i) != corrupt_.end()) {
      stats_.record_corrupt("gen#" + std::to_string(i));
      return std::nullopt;
    }
    cv::Mat m(20 + static_cast<int>(i % 7) * 9, 30 + static_cast<int>(i % 5) * 11, CV_8UC3);
    cv::RNG rng(static_cast<uint64_t>(i) + 1);
    rng.fill(m, cv::RNG::UNIFORM, 0, 256);
    stats_.record_decoded();
    return data::Sample{m, i % 10, "gen#" + std::to_string(i)};
  }
  const data::DatasetStats& stats() const override { return stats_; }

 private:
  int64_t n_;
  std::vector<int64_t> corrupt_;
  mutable data::DatasetStats stats_;
};

using data::testing::small_views;

}  // namespace saccade::data_plane::testing
