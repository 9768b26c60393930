#include "dataloader/ssl_loader.h"

#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <algorithm>

#include "dataloader/random.h"
#include "tests/dataloader/small_views.h"

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
  return testing::small_views();
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
  EXPECT_EQ(a.teacher_global.pixels, b.teacher_global.pixels);
  EXPECT_EQ(a.student_seq.positions, b.student_seq.positions);
  EXPECT_EQ(a.student_local.pixels, b.student_local.pixels);
  EXPECT_EQ(a.student_local.augment, b.student_local.augment);
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
  EXPECT_NE(one[0].batch->teacher_global.pixels, one[1].batch->teacher_global.pixels);
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

TEST(ViewSeed, OneRankKeepsTheSeedsOfEarlierReleases) {
  // Before view_seed_at, image seeds were mix_seed(mix_seed(seed, epoch), offset) of the
  // position it was drawn at; checkpoints' resumed views depend on that.
  ShardedSampler sampler({23, 1, 0, 5, true, false});
  for (DataPosition at :
       {DataPosition{0, 0}, DataPosition{0, 22}, DataPosition{0, 23}, DataPosition{3, 7}}) {
    EXPECT_EQ(view_seed_at(42, sampler, at), mix_seed(mix_seed(42, static_cast<uint64_t>(at.epoch)),
                                                      static_cast<uint64_t>(at.offset)));
  }
  // An epoch's end and the next epoch's start are one position.
  EXPECT_EQ(view_seed_at(42, sampler, {1, 0}), view_seed_at(42, sampler, {0, 23}));
  ShardedSampler rank1({23, 2, 1, 5, true, false});
  EXPECT_EQ(view_seed_at(42, rank1, {1, 0}), view_seed_at(42, rank1, {0, 12}));
}

TEST(ViewSeed, TwoRanksOfBatchBCutTheViewsOfOneRankOfBatch2B) {
  auto ds = std::make_shared<GeneratedDataset>(20);
  // 20 images: one rank takes batches of 8, two ranks batches of 4; 4 batches cross an epoch.
  SslLoader one(ds, {20, 1, 0, 5, true, false}, {0, 0}, options(), {8, 1, 1, 42});
  SslLoader r0(ds, {20, 2, 0, 5, true, false}, {0, 0}, options(), {4, 1, 1, 42});
  SslLoader r1(ds, {20, 2, 1, 5, true, false}, {0, 0}, options(), {4, 1, 1, 42});
  const ViewOptions o = options();
  for (int n = 0; n < 4; ++n) {
    SCOPED_TRACE(n);
    const LoadedBatch whole = one.next();
    const LoadedBatch halves[2] = {r0.next(), r1.next()};
    for (int64_t j = 0; j < 4; ++j) {
      for (int r = 0; r < 2; ++r) {
        // Rank r's slot j is entry 2j + r of the pair: slot 2j + r of the single rank.
        const SslBatch& a = *whole.batch;
        const SslBatch& b = *halves[r].batch;
        const int64_t slot = 2 * j + r;
        EXPECT_EQ(a.indices[slot], b.indices[j]);
        const int64_t g = a.teacher_global.tokens * a.teacher_global.patch_bytes();
        EXPECT_TRUE(std::equal(a.teacher_global.pixels.begin() + slot * g,
                               a.teacher_global.pixels.begin() + (slot + 1) * g,
                               b.teacher_global.pixels.begin() + j * g));
        for (int k = 0; k < o.glimpses; ++k) {  // step-major: view k * B + image
          const int64_t t = a.student_seq.tokens * 3;
          EXPECT_TRUE(std::equal(a.student_seq.positions.begin() + (k * 8 + slot) * t,
                                 a.student_seq.positions.begin() + (k * 8 + slot + 1) * t,
                                 b.student_seq.positions.begin() + (k * 4 + j) * t));
        }
      }
    }
  }
}

}  // namespace
}  // namespace saccade::data
