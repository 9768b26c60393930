#include "dataloader/ssl_loader.h"

#include <gtest/gtest.h>

#include <opencv2/core.hpp>

namespace saccade::data {
namespace {

// Generated images of varying size; `corrupt` indices decode to nothing, `poison` throws.
class GeneratedDataset : public Dataset {
 public:
  GeneratedDataset(int64_t n, std::vector<int64_t> corrupt = {}, int64_t poison = -1)
      : n_(n), corrupt_(std::move(corrupt)), poison_(poison) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 10; }
  int channels() const override { return 3; }
  std::optional<Sample> get(int64_t i) const override {
    if (i == poison_) throw std::runtime_error("poisoned sample");
    if (std::find(corrupt_.begin(), corrupt_.end(), i) != corrupt_.end()) {
      stats_.record_corrupt("gen#" + std::to_string(i));
      return std::nullopt;
    }
    cv::Mat m(20 + static_cast<int>(i % 7) * 9, 30 + static_cast<int>(i % 5) * 11, CV_8UC3);
    cv::RNG rng(static_cast<uint64_t>(i) + 1);
    rng.fill(m, cv::RNG::UNIFORM, 0, 256);
    stats_.record_decoded();
    return Sample{m, i % 10, "gen#" + std::to_string(i)};
  }
  const DatasetStats& stats() const override { return stats_; }

 private:
  int64_t n_;
  std::vector<int64_t> corrupt_;
  int64_t poison_;
  mutable DatasetStats stats_;
};

ViewOptions options() {
  ViewOptions o;
  o.patch_size = 4;
  o.channels = 3;
  o.multizoom = 3;
  o.zoom_max = 3.0f;
  o.fovea_grid = 2;
  o.fovea_zoom_min = 2.0f;
  o.fovea_zoom_max = 3.0f;
  o.glimpses = 2;
  o.global_grid = 4;
  o.global_scale_min = 0.32f;
  o.global_scale_max = 1.0f;
  o.local_grid = 2;
  o.local_views = 2;
  o.local_scale_min = 0.05f;
  o.local_scale_max = 0.32f;
  o.pixel_mean = {0.5f};
  o.pixel_std = {0.25f};
  return o;
}

std::vector<LoadedBatch> take(std::shared_ptr<const Dataset> ds, int threads, int depth,
                              DataPosition start, int n) {
  SslLoader loader(ds, {ds->size(), 1, 0, 5, true, false}, start, options(),
                   {4, threads, depth, 42});
  std::vector<LoadedBatch> out;
  for (int i = 0; i < n; ++i) out.push_back(loader.next());
  return out;
}

void expect_same(const SslBatch& a, const SslBatch& b) {
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.teacher_global.patches, b.teacher_global.patches);
  EXPECT_EQ(a.student_seq.positions, b.student_seq.positions);
  EXPECT_EQ(a.student_local.patches, b.student_local.patches);
}

TEST(SslLoader, BatchesDoNotDependOnThreadsOrDepth) {
  auto ds = std::make_shared<GeneratedDataset>(23);
  const auto one = take(ds, 1, 1, {0, 0}, 7);  // crosses an epoch boundary (23 / 4)
  const auto many = take(ds, 3, 4, {0, 0}, 7);
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    expect_same(*one[i].batch, *many[i].batch);
    EXPECT_EQ(one[i].position, many[i].position);
    EXPECT_GT(one[i].prep_seconds, 0.0);
  }
  EXPECT_EQ(one[0].position, (DataPosition{0, 4}));
  EXPECT_EQ(one[6].position.epoch, 1);
  EXPECT_NE(one[0].batch->teacher_global.patches, one[1].batch->teacher_global.patches);
}

TEST(SslLoader, ResumeFromAPositionContinuesExactly) {
  auto ds = std::make_shared<GeneratedDataset>(23);
  const auto straight = take(ds, 2, 2, {0, 0}, 5);
  const auto resumed = take(ds, 2, 2, straight[2].position, 2);
  expect_same(*straight[3].batch, *resumed[0].batch);
  expect_same(*straight[4].batch, *resumed[1].batch);
}

TEST(SslLoader, CorruptImagesAreSkippedAndCounted) {
  auto ds = std::make_shared<GeneratedDataset>(12, std::vector<int64_t>{3, 4, 9});
  const auto batches = take(ds, 2, 2, {0, 0}, 6);  // two epochs
  for (const auto& b : batches) {
    for (int64_t label : b.batch->labels) EXPECT_GE(label, 0);
  }
  EXPECT_GE(ds->stats().skipped_corrupt(), 3);
}

TEST(SslLoader, WorkerErrorsReachTheConsumer) {
  auto ds = std::make_shared<GeneratedDataset>(8, std::vector<int64_t>{}, 5);
  SslLoader loader(ds, {8, 1, 0, 0, false, false}, {0, 0}, options(), {4, 2, 2, 0});
  EXPECT_NO_THROW(loader.next());  // indices 0..3
  EXPECT_THROW(loader.next(), std::runtime_error);
}

TEST(SslLoader, BadOptionsAreRefused) {
  auto ds = std::make_shared<GeneratedDataset>(8);
  ViewOptions gray = options();
  gray.channels = 1;
  EXPECT_THROW(SslLoader(ds, {8, 1, 0, 0, true, false}, {0, 0}, gray, {4, 1, 1, 0}),
               std::invalid_argument);
  EXPECT_THROW(SslLoader(ds, {8, 1, 0, 0, true, false}, {0, 0}, options(), {0, 1, 1, 0}),
               std::invalid_argument);
}

}  // namespace
}  // namespace saccade::data
