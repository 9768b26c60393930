#include "dataloader/ssl_loader.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "dataloader/random.h"

namespace saccade::data {

uint64_t view_seed(uint64_t root, int64_t epoch, int64_t global_entry) {
  return mix_seed(mix_seed(root, static_cast<uint64_t>(epoch)),
                  static_cast<uint64_t>(global_entry));
}

uint64_t view_seed_at(uint64_t root, const ShardedSampler& sampler, DataPosition at) {
  const int64_t world = sampler.options().world_size;
  const int64_t rank = sampler.options().rank;
  const int64_t epoch_entries = sampler.num_samples() * world;  // the padded (or cut) epoch
  const bool at_end = at.offset == sampler.num_samples();
  const int64_t epoch = at_end ? at.epoch + 1 : at.epoch;
  const int64_t entry = at_end ? rank : at.offset * world + rank;
  if (entry == 0 && epoch > 0) return view_seed(root, epoch - 1, epoch_entries);
  return view_seed(root, epoch, entry);
}

struct SslLoader::Pending {
  LoadedBatch loaded;
  std::vector<int64_t> indices;  // dataset index per slot
  std::vector<uint64_t> seeds;   // view seed per slot
  int64_t next_slot = 0;         // first slot no worker has taken
  int64_t done = 0;              // slots filled (or failed)
  std::exception_ptr error;      // first failure of a slot, rethrown when this batch is due
};

SslLoader::SslLoader(std::shared_ptr<const Dataset> dataset, ShardOptions shard, DataPosition start,
                     ViewOptions views, LoaderOptions options)
    : dataset_(std::move(dataset)), views_(std::move(views)), options_(options), sampler_(shard) {
  if (options_.batch_size < 1)
    throw std::invalid_argument(
        fmt::format("loader batch_size: expected >= 1, got {}", options_.batch_size));
  if (options_.threads < 1)
    throw std::invalid_argument(
        fmt::format("loader threads: expected >= 1, got {}", options_.threads));
  if (options_.queue_depth < 1) {
    throw std::invalid_argument(
        fmt::format("loader queue_depth: expected >= 1, got {}", options_.queue_depth));
  }
  views_.validate();
  if (dataset_->channels() != views_.channels) {
    throw std::invalid_argument(
        fmt::format("data.channels: the dataset has {} channel(s), the views expect {}",
                    dataset_->channels(), views_.channels));
  }
  sampler_.seek(start);
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { work(); });
}

SslLoader::~SslLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  room_.notify_all();
  ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

LoadedBatch SslLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock,
              [&] { return !pending_.empty() && pending_.front()->done == options_.batch_size; });
  std::unique_ptr<Pending> front = std::move(pending_.front());
  pending_.pop_front();
  lock.unlock();
  room_.notify_all();
  if (front->error) std::rethrow_exception(front->error);
  return std::move(front->loaded);
}

void SslLoader::work() {
  const int64_t B = options_.batch_size;
  for (;;) {
    Pending* job = nullptr;
    int64_t slot = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Take a slot of the oldest unfinished batch, opening a new batch when there is room.
      for (;;) {
        if (stopping_) return;
        job = nullptr;
        for (auto& p : pending_) {
          if (p->next_slot < B) {
            job = p.get();
            break;
          }
        }
        if (job) break;
        if (static_cast<int>(pending_.size()) < options_.queue_depth) {
          auto p = std::make_unique<Pending>();
          p->loaded.batch = std::make_unique<SslBatch>();
          p->loaded.batch->allocate(views_, B);
          for (int64_t i = 0; i < B; ++i) {
            const DataPosition at = sampler_.position();
            p->indices.push_back(sampler_.next());
            p->seeds.push_back(view_seed_at(options_.seed, sampler_, at));
          }
          p->loaded.position = sampler_.position();
          pending_.push_back(std::move(p));
          continue;
        }
        room_.wait(lock);
      }
      slot = job->next_slot++;
    }
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      Sample sample = get_or_next_good(*dataset_, job->indices[slot]);
      make_ssl_views(views_, sample.image, job->seeds[slot], slot, *job->loaded.batch);
      job->loaded.batch->labels[slot] = sample.label;
      job->loaded.batch->indices[slot] = job->indices[slot];
    } catch (...) {
      error = std::current_exception();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !job->error) job->error = error;
    job->loaded.prep_seconds += seconds;
    if (++job->done == B) ready_.notify_all();
  }
}

}  // namespace saccade::data
