#include "dataloader/sharded_sampler.h"

#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "dataloader/random.h"

namespace saccade::data {

ShardedSampler::ShardedSampler(ShardOptions options) : options_(options) {
  if (options_.dataset_size < 1) {
    throw std::invalid_argument(
        fmt::format("ShardedSampler: dataset_size must be >= 1, got {}", options_.dataset_size));
  }
  if (options_.world_size < 1) {
    throw std::invalid_argument(
        fmt::format("ShardedSampler: world_size must be >= 1, got {}", options_.world_size));
  }
  if (options_.rank < 0 || options_.rank >= options_.world_size) {
    throw std::invalid_argument(fmt::format("ShardedSampler: rank must be in [0, {}), got {}",
                                            options_.world_size, options_.rank));
  }
  const int64_t n = options_.dataset_size;
  const int64_t w = options_.world_size;
  num_samples_ = options_.drop_last ? n / w : (n + w - 1) / w;
  if (num_samples_ == 0) {
    throw std::invalid_argument(fmt::format(
        "ShardedSampler: drop_last with dataset_size {} < world_size {} leaves no index per rank",
        n, w));
  }
}

std::vector<int64_t> ShardedSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(options_.dataset_size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options_.shuffle) return order;
  SplitMix64 rng(mix_seed(options_.seed, static_cast<uint64_t>(epoch)));
  for (size_t i = order.size() - 1; i > 0; --i) {  // Fisher-Yates
    const size_t j = static_cast<size_t>(rng.below(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> ShardedSampler::indices(int64_t epoch) const {
  if (epoch < 0) {
    throw std::invalid_argument(fmt::format("ShardedSampler: epoch must be >= 0, got {}", epoch));
  }
  const std::vector<int64_t> order = permutation(epoch);
  const int64_t n = options_.dataset_size;
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) {
    const int64_t padded = options_.rank + k * options_.world_size;  // entry of the padded list
    shard.push_back(order[static_cast<size_t>(padded % n)]);         // wraps into the padding
  }
  return shard;
}

int64_t ShardedSampler::next() {
  if (position_.offset == num_samples_) position_ = {position_.epoch + 1, 0};
  if (cached_epoch_ != position_.epoch) {
    cached_ = indices(position_.epoch);
    cached_epoch_ = position_.epoch;
  }
  return cached_[static_cast<size_t>(position_.offset++)];
}

void ShardedSampler::seek(DataPosition position) {
  if (position.epoch < 0 || position.offset < 0 || position.offset > num_samples_) {
    throw std::invalid_argument(
        fmt::format("ShardedSampler::seek: position (epoch {}, offset {}) outside epoch >= 0, "
                    "offset in [0, {}]",
                    position.epoch, position.offset, num_samples_));
  }
  position_ = position;
}

}  // namespace saccade::data
