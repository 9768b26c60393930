#include "dataloader/sharded_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "tests/dataloader/expect_error.h"

namespace saccade::data {
namespace {

using testing::expect_error;

std::vector<std::vector<int64_t>> all_shards(ShardOptions options, int64_t epoch) {
  std::vector<std::vector<int64_t>> shards;
  for (int r = 0; r < options.world_size; ++r) {
    options.rank = r;
    shards.push_back(ShardedSampler(options).indices(epoch));
  }
  return shards;
}

TEST(ShardedSampler, PermutationIsAPermutationAndShuffled) {
  ShardedSampler sampler({1000, 1, 0, 42, true, false});
  auto order = sampler.permutation(3);
  int fixed_points = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed_points += order[i] == i;
  EXPECT_LT(fixed_points, 10);  // about 1 expected for a random permutation
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(order[i], i);
}

TEST(ShardedSampler, ShardsAreDisjointAndCoverWhenSizeDivides) {
  const auto shards = all_shards({1200, 4, 0, 7, true, false}, 0);
  std::vector<int64_t> all;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 300u);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 1200; ++i) ASSERT_EQ(all[i], i);  // each index exactly once
}

TEST(ShardedSampler, PaddingWrapsAroundAndRepeatsOnlyThePaddingCount) {
  // 10 indices over 4 ranks: 3 each, 2 padding entries taken from the permutation's start.
  ShardOptions options{10, 4, 0, 9, true, false};
  const auto shards = all_shards(options, 2);
  const auto order = ShardedSampler(options).permutation(2);
  std::map<int64_t, int> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 3u);
    for (int64_t i : shard) seen[i]++;
  }
  EXPECT_EQ(seen.size(), 10u);  // covers everything
  EXPECT_EQ(seen[order[0]], 2);
  EXPECT_EQ(seen[order[1]], 2);
  // Torch's layout: rank r takes padded[r], padded[r + 4], ...; padded[10], [11] = order[0], [1].
  EXPECT_EQ(shards[2], (std::vector<int64_t>{order[2], order[6], order[0]}));
  EXPECT_EQ(shards[3], (std::vector<int64_t>{order[3], order[7], order[1]}));
  // More ranks than samples: padding wraps more than once.
  const auto many = all_shards({3, 5, 0, 1, false, false}, 0);
  EXPECT_EQ(many[3], std::vector<int64_t>{0});
  EXPECT_EQ(many[4], std::vector<int64_t>{1});
}

TEST(ShardedSampler, DropLastDropsTheTailAndStaysDisjoint) {
  const auto shards = all_shards({10, 4, 0, 9, true, true}, 1);
  std::vector<int64_t> all;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 2u);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 8u);
}

TEST(ShardedSampler, DeterministicPerSeedAndEpochDifferentAcross) {
  ShardOptions options{500, 3, 1, 2024, true, false};
  ShardedSampler a(options), b(options);
  EXPECT_EQ(a.indices(5), b.indices(5));
  EXPECT_NE(a.indices(5), a.indices(6));
  options.seed = 2025;
  EXPECT_NE(a.indices(5), ShardedSampler(options).indices(5));
  options.shuffle = false;
  const auto plain = ShardedSampler(options).indices(5);
  EXPECT_EQ(plain[0], 1);
  EXPECT_EQ(plain[1], 4);
  EXPECT_EQ(plain, ShardedSampler(options).indices(6));  // no shuffle: same every epoch
}

TEST(ShardedSampler, StreamingCrossesEpochsAndResumeEqualsContinuing) {
  ShardOptions options{37, 2, 1, 11, true, false};  // 19 per rank
  ShardedSampler continuous(options);
  std::vector<int64_t> expected;
  for (int e = 0; e < 3; ++e) {
    const auto shard = continuous.indices(e);
    expected.insert(expected.end(), shard.begin(), shard.end());
  }
  std::vector<int64_t> streamed;
  for (int k = 0; k < 25; ++k) streamed.push_back(continuous.next());
  const DataPosition saved = continuous.position();
  EXPECT_EQ(saved, (DataPosition{1, 6}));
  for (int k = 25; k < 57; ++k) streamed.push_back(continuous.next());
  EXPECT_EQ(streamed, expected);

  ShardedSampler resumed(options);  // a fresh process restoring the checkpointed position
  resumed.seek(saved);
  for (int k = 25; k < 57; ++k) ASSERT_EQ(resumed.next(), expected[k]) << k;
  // A position at the very end of an epoch resumes at the next epoch's start.
  resumed.seek({0, 19});
  EXPECT_EQ(resumed.next(), expected[19]);
}

TEST(ShardedSampler, BadArgumentsAreClear) {
  expect_error<std::invalid_argument>(
      [] {
        ShardedSampler({0, 1, 0, 0, true, false});
      },
      {"dataset_size", "0"});
  expect_error<std::invalid_argument>(
      [] {
        ShardedSampler({5, 0, 0, 0, true, false});
      },
      {"world_size"});
  expect_error<std::invalid_argument>(
      [] {
        ShardedSampler({5, 2, 2, 0, true, false});
      },
      {"rank", "[0, 2)", "2"});
  expect_error<std::invalid_argument>(
      [] {
        ShardedSampler({3, 4, 0, 0, true, true});
      },
      {"drop_last"});
  ShardedSampler sampler({5, 1, 0, 0, true, false});
  expect_error<std::invalid_argument>([&] { sampler.seek({0, 6}); }, {"offset 6"});
  expect_error<std::invalid_argument>([&] { sampler.indices(-1); }, {"epoch"});
}

}  // namespace
}  // namespace saccade::data
