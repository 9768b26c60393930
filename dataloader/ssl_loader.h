// Prefetching loader of SSL batches: worker threads decode images and cut
// their views into batches ahead of the trainer, at most queue_depth batches
// ahead (back-pressure), and hand them out in order.
//
// Deterministic: batch n holds the sampler's entries n*B .. n*B+B-1 and image
// i's views are drawn from view_seed_at(seed, its data position), so the same
// batches come out whatever the thread count and after a resume.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/sharded_sampler.h"
#include "dataloader/views.h"

namespace saccade::data {

// The view seed of entry `global_entry` of epoch `epoch`'s padded permutation.
// Depends on the entry's place in the whole epoch, not on a rank's shard, so
// W learners with batch b cut the same views as 1 learner with batch W*b.
uint64_t view_seed(uint64_t root, int64_t epoch, int64_t global_entry);

// The view seed of the entry rank `sampler.options().rank` draws next from
// sampler position `at`: global entry at.offset * world_size + rank of epoch
// at.epoch (the first entries of the next epoch when `at` is an epoch's end).
// The first entry of every epoch after the first keeps the seed (e - 1, end
// of e - 1) that the single-rank loader has always given it, whether `at`
// says (e - 1, num_samples) or (e, 0). The one seed function of SslLoader and
// of remote batches (workers/data).
uint64_t view_seed_at(uint64_t root, const ShardedSampler& sampler, DataPosition at);

struct LoaderOptions {
  int64_t batch_size = 0;  // images per batch on this rank
  int threads = 1;         // worker threads
  int queue_depth = 2;     // batches prepared ahead of the consumer
  uint64_t seed = 0;       // root of the views' random draws
};

// A ready batch and what it cost to make.
struct LoadedBatch {
  std::unique_ptr<SslBatch> batch;
  DataPosition position;    // the sampler's position after this batch (resume from here)
  double prep_seconds = 0;  // worker-thread time spent decoding and cutting views
  size_t wire_bytes = 0;    // the batch's tensor bytes received from a data actor; 0 in process
};

class SslLoader {
 public:
  // Starts the workers at `start` (a checkpoint's data position, or {0, 0}).
  // Throws std::invalid_argument naming a bad option or a channel mismatch.
  SslLoader(std::shared_ptr<const Dataset> dataset, ShardOptions shard, DataPosition start,
            ViewOptions views, LoaderOptions options);
  ~SslLoader();  // stops and joins the workers
  SslLoader(const SslLoader&) = delete;
  SslLoader& operator=(const SslLoader&) = delete;

  // The next batch, in order; blocks until it is ready. Rethrows the error of
  // a worker that failed on one of this batch's images (a decode failure is
  // not an error: corrupt images are skipped by get_or_next_good).
  LoadedBatch next();

 private:
  struct Pending;  // a batch being filled
  void work();

  std::shared_ptr<const Dataset> dataset_;  // shared with other loaders (e.g. validation)
  ViewOptions views_;
  LoaderOptions options_;
  ShardedSampler sampler_;  // guarded by mutex_

  std::mutex mutex_;
  std::condition_variable ready_;                 // a batch completed
  std::condition_variable room_;                  // the consumer took a batch
  std::deque<std::unique_ptr<Pending>> pending_;  // in batch order; front is next()'s
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace saccade::data
