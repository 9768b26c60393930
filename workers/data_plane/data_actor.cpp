#include "workers/data_plane/data_actor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dataloader/dataset_factory.h"
#include "workers/data_plane/batch_codec.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/link_options.h"

namespace saccade::data_plane {

namespace {

using Body = wire::Envelope::Body;

// Runs fn(0) .. fn(n-1) on `threads` threads, the caller's among them, and
// waits for all; rethrows the first error. Workers sleep between rounds.
class SlotPool {
 public:
  explicit SlotPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~SlotPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      n_ = n;
      next_ = 0;
      done_ = 0;
      error_ = nullptr;
      ++round_;
    }
    start_.notify_all();
    take_slots();
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ == n_; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stop_ || round_ != seen; });
        if (stop_) return;
        seen = round_;
      }
      take_slots();
    }
  }

  // Cuts slots of the current round until none is left.
  void take_slots() {
    for (;;) {
      int64_t slot = 0;
      const std::function<void(int64_t)>* fn = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (fn_ == nullptr || next_ >= n_) return;
        slot = next_++;
        fn = fn_;
      }
      std::exception_ptr error;
      try {
        (*fn)(slot);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      if (++done_ == n_) finished_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_;                     // a round began, or stop
  std::condition_variable finished_;                  // the round's last slot is done
  const std::function<void(int64_t)>* fn_ = nullptr;  // the round's work, owned by run()'s caller
  int64_t n_ = 0;
  int64_t next_ = 0;  // first slot no thread has taken
  int64_t done_ = 0;
  uint64_t round_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace

struct BatchServer::Impl {
  Impl(std::shared_ptr<const data::Dataset> ds, data::ViewOptions v, int threads)
      : dataset(std::move(ds)), views(std::move(v)), pool(std::max(1, threads)) {}

  std::shared_ptr<const data::Dataset> dataset;  // shared with the caller
  data::ViewOptions views;
  int64_t max_images = 0;  // the largest request whose answer fits a frame
  SlotPool pool;
  std::optional<runtime::RequestServer> server;  // bound once the options are checked
};

BatchServer::BatchServer(std::shared_ptr<const data::Dataset> dataset, data::ViewOptions views,
                         BatchServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(dataset), std::move(views), options.threads)) {
  Impl& s = *impl_;
  s.views.validate();
  if (s.dataset->channels() != s.views.channels) {
    throw std::invalid_argument(
        fmt::format("data.channels: the dataset has {} channel(s), the views expect {}",
                    s.dataset->channels(), s.views.channels));
  }
  const size_t limit =
      options.expect.max_frame_bytes > 0 ? options.expect.max_frame_bytes : size_t{1} << 31;
  const size_t envelope = batch_frame_bytes(s.views, 0);
  const size_t per_image = batch_frame_bytes(s.views, 1) - envelope;
  s.max_images = limit > envelope ? static_cast<int64_t>((limit - envelope) / per_image) : 0;
  if (s.max_images < 1) {
    throw std::invalid_argument(fmt::format(
        "cluster.max_message_bytes: {} bytes cannot carry the views of one image ({} bytes)", limit,
        per_image + envelope));
  }
  s.server.emplace(options);
  spdlog::info(
      "data actor serving {} images on {}{}{} (CURVE {}, {} thread(s), at most {} images "
      "per request)",
      s.dataset->size(), s.server->endpoint(), s.server->local_endpoint().empty() ? "" : " and ",
      s.server->local_endpoint(), options.security.curve ? "on" : "off", options.threads,
      s.max_images);
}

BatchServer::~BatchServer() = default;

std::string BatchServer::endpoint() const {
  return impl_->server->endpoint();
}

std::string BatchServer::local_endpoint() const {
  return impl_->server->local_endpoint();
}

uint64_t BatchServer::dropped() const {
  return impl_->server->dropped();
}

void BatchServer::serve(const std::function<bool()>& stopping) {
  Impl& s = *impl_;
  s.server->serve(stopping, [&](runtime::Exchange& ex) {
    if (ex.message().kind() != Body::BATCH_REQUEST) {
      ex.refuse(fmt::format("a {} message; data actors take only BatchRequest",
                            wire::kind_name(ex.message().kind())));
      return;
    }
    const auto request = ex.envelope().getBody().getBatchRequest();
    const auto indices = request.getIndices();
    const auto seeds = request.getSeeds();
    const int64_t n = indices.size();
    if (n < 1 || n > s.max_images || seeds.size() != indices.size()) {
      ex.refuse(
          fmt::format("a request of {} images with {} seeds (batch {}; 1 .. {} "
                      "images, one seed each)",
                      n, seeds.size(), request.getBatchId(), s.max_images));
      return;
    }
    const int64_t size = s.dataset->size();
    std::optional<int64_t> bad;
    for (int64_t i : indices) {
      if (i < 0 || i >= size) bad = i;
    }
    if (bad) {
      ex.refuse(fmt::format("an index outside the dataset's [0, {}): {} (batch {})", size, *bad,
                            request.getBatchId()));
      return;
    }

    data::SslBatch batch;
    batch.allocate(s.views, n);
    std::atomic<int64_t> skipped{0};
    s.pool.run(n, [&](int64_t slot) {
      const int64_t index = indices[static_cast<unsigned>(slot)];
      // get_or_next_good's substitution, counting the request's corrupt images.
      std::optional<data::Sample> sample = s.dataset->get(index);
      if (!sample) {
        ++skipped;
        sample = data::get_or_next_good(*s.dataset, (index + 1) % size);
      }
      data::make_ssl_views(s.views, sample->image, seeds[static_cast<unsigned>(slot)], slot, batch);
      batch.labels[static_cast<size_t>(slot)] = sample->label;
      batch.indices[static_cast<size_t>(slot)] = index;
    });
    batch.skipped_corrupt = skipped.load();
    // The data position is the learner's: it is not known here.
    const bool sent = ex.reply([&](wire::Envelope::Builder out) {
      write_batch(batch, request.getBatchId(), {-1, -1}, out.getBody().initBatch());
    });
    if (!sent) spdlog::warn("could not answer request {} of {}", request.getBatchId(), ex.sender());
    ++batches_;
    images_ += static_cast<uint64_t>(n);
  });
}

namespace {

class DataActor : public runtime::ActorBody {
 public:
  int run(runtime::ActorContext& ctx) override {
    const JobConfig& config = ctx.config();
    try {
      const std::shared_ptr<const data::Dataset> dataset =
          data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
      BatchServerOptions options;
      static_cast<runtime::RequestServerOptions&>(options) =
          job_options::request_server_options(config, ctx.assignment());
      options.threads = static_cast<int>(config.data.loader_threads);
      BatchServer server(dataset, job_options::view_options(config), options);
      runtime::RateReporter rate(ctx);  // batches served, images/s
      server.serve([&] {
        rate.tick(static_cast<int64_t>(server.batches_served()), server.images_served());
        return ctx.stopping();
      });
      spdlog::info("data actor stops: {} batches served, {} frames dropped",
                   server.batches_served(), server.dropped());
      return 0;
    } catch (const std::exception& e) {
      spdlog::error("data actor failed: {}", e.what());
      return 1;
    }
  }
};

}  // namespace

std::unique_ptr<runtime::ActorBody> make_data_actor() {
  return std::make_unique<DataActor>();
}

}  // namespace saccade::data_plane
