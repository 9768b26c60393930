// Generated images and small views for the data plane tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <opencv2/core.hpp>

#include <cstring>

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

// The same floats bit for bit (NaN payloads and signed zeros included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Every view, image, label and index of `b` is `a`'s, bit for bit.
inline void expect_same_batch(const data::SslBatch& a, const data::SslBatch& b) {
  EXPECT_EQ(a.batch_size, b.batch_size);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.labels, b.labels);
  for (auto set : {&data::SslBatch::teacher_global, &data::SslBatch::student_global,
                   &data::SslBatch::student_local, &data::SslBatch::teacher_seq,
                   &data::SslBatch::student_seq}) {
    EXPECT_EQ((a.*set).views, (b.*set).views);
    EXPECT_EQ((a.*set).tokens, (b.*set).tokens);
    EXPECT_EQ((a.*set).pixels, (b.*set).pixels);
    EXPECT_TRUE(same_bits((a.*set).boxes, (b.*set).boxes));
    EXPECT_TRUE(same_bits((a.*set).positions, (b.*set).positions));
    EXPECT_TRUE(same_bits((a.*set).augment, (b.*set).augment));
  }
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    EXPECT_EQ(a.images[i].height, b.images[i].height);
    EXPECT_EQ(a.images[i].width, b.images[i].width);
    EXPECT_EQ(a.images[i].pixels, b.images[i].pixels);
  }
}

}  // namespace saccade::data_plane::testing
