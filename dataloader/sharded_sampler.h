// Deterministic sharding of a dataset's indices over ranks, epoch by epoch.
//
// Same contract as torch's DistributedSampler: each epoch, a permutation of
// [0, N) that depends only on (seed, epoch) (or the identity without shuffle)
// is padded by wrapping around to world_size * ceil(N / world_size) entries
// (or, with drop_last, cut to world_size * floor(N / world_size)); rank r takes
// entries r, r + world_size, r + 2 world_size, ... So the shards of an epoch
// are disjoint apart from the at most world_size - 1 padding repeats, together
// cover every index (all but the dropped tail with drop_last), and every rank
// gets num_samples() indices. The permutation is our own Fisher-Yates over
// SplitMix64 (dataloader/random.h), identical with any standard library.
#pragma once

#include <cstdint>
#include <vector>

namespace saccade::data {

struct ShardOptions {
  int64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;  // false: pad by wrapping (torch's default)
};

// A point in the index stream of one rank: the next index to hand out is entry
// `offset` of epoch `epoch`'s shard. The trainer checkpoints this.
struct DataPosition {
  int64_t epoch = 0;
  int64_t offset = 0;
  bool operator==(const DataPosition&) const = default;
};

class ShardedSampler {
 public:
  // Throws std::invalid_argument naming the field for dataset_size < 1,
  // world_size < 1, rank outside [0, world_size), or drop_last leaving no index.
  explicit ShardedSampler(ShardOptions options);

  // Indices per rank per epoch.
  int64_t num_samples() const { return num_samples_; }
  // This rank's indices of `epoch`, in order.
  std::vector<int64_t> indices(int64_t epoch) const;
  // The full permutation of [0, N) of `epoch`, before padding and striding.
  std::vector<int64_t> permutation(int64_t epoch) const;

  // Streaming over epochs, resumable: next() hands out this rank's indices
  // epoch after epoch; position() says where the stream stands and seek() puts
  // it back there, so seek(p) then next()... equals continuing from p.
  int64_t next();
  DataPosition position() const { return position_; }
  // Throws std::invalid_argument for a negative epoch or offset outside [0, num_samples()].
  void seek(DataPosition position);

  const ShardOptions& options() const { return options_; }

 private:
  ShardOptions options_;
  int64_t num_samples_ = 0;
  DataPosition position_;
  int64_t cached_epoch_ = -1;  // epoch whose shard is in cached_
  std::vector<int64_t> cached_;
};

}  // namespace saccade::data
