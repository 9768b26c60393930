#include "workers/data/batch_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "workers/data/batch_codec.h"
#include "workers/data/data_options.h"

namespace saccade::workers {

namespace {
using Body = wire::Envelope::Body;
constexpr int64_t kMaxWaitMs = 100;  // longest wait between calls of stopping()
}  // namespace

struct RemoteBatchSource::Request {
  uint64_t id = 0;
  std::vector<int64_t> indices;         // dataset index per image
  std::vector<uint64_t> seeds;          // view seed per image
  data::DataPosition after;             // the sampler's position after this batch
  int actor = -1;                       // the data actor it waits on; -1: to send
  int avoid = -1;                       // the actor that last failed it: another is preferred
  std::optional<data::SslBatch> batch;  // the answer, once it came
};

struct RemoteBatchSource::Actor {
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;  // owned; replaced when re-dialed
  int in_flight = 0;                      // requests it holds
  int64_t progress_ms = 0;                // its last answer, or when it last got work while idle
  bool suspect = false;                   // timed out and silent since: one request at a time
};

RemoteSourceOptions batch_source_options(const JobConfig& config, const control::Assignment& me,
                                         data::ShardOptions shard, int64_t batch) {
  RemoteSourceOptions o;
  o.endpoints = me.peers;
  o.shard = shard;
  o.views = view_options(config);
  o.batch_size = batch;
  o.seed = view_seed_root(config);
  o.queue_depth = static_cast<int>(config.data.queue_depth);
  o.request_timeout = std::chrono::milliseconds(config.data.request_timeout_ms);
  o.security = control::load_security(config.security, /*as_server=*/false);
  o.sender = {config.job.name, wire::Role::LEARNER, me.rank, me.node};
  o.expect = control::expect_for(config);
  return o;
}

RemoteBatchSource::RemoteBatchSource(RemoteSourceOptions options, data::DataPosition start)
    : options_(std::move(options)), sampler_(options_.shard), writer_(options_.sender) {
  if (options_.endpoints.empty())
    throw std::invalid_argument("remote batches: no data actor endpoint (learner peers)");
  if (options_.batch_size < 1) {
    throw std::invalid_argument(
        fmt::format("remote batches: batch_size must be >= 1, got {}", options_.batch_size));
  }
  if (options_.queue_depth < 1) {
    throw std::invalid_argument(
        fmt::format("data.queue_depth: expected >= 1, got {}", options_.queue_depth));
  }
  if (options_.request_timeout.count() < 1) {
    throw std::invalid_argument(fmt::format("data.request_timeout_ms: expected >= 1, got {}",
                                            options_.request_timeout.count()));
  }
  options_.views.validate();
  const size_t frame = batch_frame_bytes(options_.views, options_.batch_size);
  if (options_.expect.max_frame_bytes > 0 && frame > options_.expect.max_frame_bytes) {
    throw std::invalid_argument(fmt::format(
        "cluster.max_message_bytes: a batch of {} images needs frames of {} bytes, over the "
        "limit of {}",
        options_.batch_size, frame, options_.expect.max_frame_bytes));
  }
  sampler_.seek(start);
  for (const std::string& endpoint : options_.endpoints) {
    auto actor = std::make_unique<Actor>();
    actor->endpoint = endpoint;
    dial(*actor);
    actors_.push_back(std::move(actor));
  }
}

RemoteBatchSource::~RemoteBatchSource() = default;

void RemoteBatchSource::dial(Actor& actor) {
  actor.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  control::configure_client(*actor.socket, options_.security, "");
  actor.socket->set(zmq::sockopt::linger, 0);  // unanswered requests are not worth a wait
  if (options_.expect.max_frame_bytes > 0) {
    actor.socket->set(zmq::sockopt::maxmsgsize,
                      static_cast<int64_t>(options_.expect.max_frame_bytes));
  }
  actor.socket->connect(actor.endpoint);
}

std::optional<data::LoadedBatch> RemoteBatchSource::next(const std::function<bool()>& stopping) {
  for (;;) {
    if (stopping()) return std::nullopt;
    const int64_t now = control::steady_ms();
    refill();
    dispatch(now);
    if (pending_.front()->batch) {
      std::unique_ptr<Request> done = std::move(pending_.front());
      pending_.pop_front();
      skipped_corrupt_ += static_cast<uint64_t>(done->batch->skipped_corrupt);
      data::LoadedBatch loaded;
      loaded.batch = std::make_unique<data::SslBatch>(std::move(*done->batch));
      loaded.position = done->after;
      return loaded;
    }
    // Wait for answers, for room to send (a connected actor), or the next deadline.
    const bool to_send = std::any_of(pending_.begin(), pending_.end(),
                                     [](const auto& r) { return r->actor < 0 && !r->batch; });
    int64_t wait = kMaxWaitMs;
    std::vector<zmq::pollitem_t> items;
    for (const auto& a : actors_) {
      const bool room = a->in_flight < (a->suspect ? 1 : options_.queue_depth);
      items.push_back({a->socket->handle(), 0,
                       static_cast<short>(ZMQ_POLLIN | (to_send && room ? ZMQ_POLLOUT : 0)), 0});
      if (a->in_flight > 0)
        wait = std::min(wait, a->progress_ms + options_.request_timeout.count() - now);
    }
    control::poll_interruptible(items.data(), items.size(),
                                std::chrono::milliseconds(std::max<int64_t>(wait, 0)));
    const int64_t after = control::steady_ms();
    for (size_t i = 0; i < actors_.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) receive(i, after);
    }
    expire(after);
  }
}

void RemoteBatchSource::refill() {
  const size_t window = actors_.size() * static_cast<size_t>(options_.queue_depth);
  while (pending_.size() < window) {
    auto r = std::make_unique<Request>();
    r->id = next_id_++;
    for (int64_t i = 0; i < options_.batch_size; ++i) {
      r->seeds.push_back(data::view_seed_at(options_.seed, sampler_, sampler_.position()));
      r->indices.push_back(sampler_.next());
    }
    r->after = sampler_.position();
    pending_.push_back(std::move(r));
  }
}

void RemoteBatchSource::dispatch(int64_t now) {
  std::vector<bool> unreachable(actors_.size(), false);  // a send failed in this pass
  bool waiting = false;
  for (auto& r : pending_) {
    if (r->actor >= 0 || r->batch) continue;
    waiting = true;
    for (;;) {
      // The least loaded actor with room, trusted ones first, the one that failed r last.
      int best = -1;
      std::tuple<bool, bool, int> best_key{};
      for (size_t i = 0; i < actors_.size(); ++i) {
        const Actor& a = *actors_[i];
        if (unreachable[i] || a.in_flight >= (a.suspect ? 1 : options_.queue_depth)) continue;
        const std::tuple<bool, bool, int> key{a.suspect, static_cast<int>(i) == r->avoid,
                                              a.in_flight};
        if (best < 0 || key < best_key) {
          best = static_cast<int>(i);
          best_key = key;
        }
      }
      if (best < 0) break;
      Actor& a = *actors_[static_cast<size_t>(best)];
      if (!send(a, *r)) {
        unreachable[static_cast<size_t>(best)] = true;
        continue;
      }
      if (a.in_flight++ == 0) a.progress_ms = now;
      r->actor = best;
      break;
    }
  }
  const bool stuck = std::any_of(pending_.begin(), pending_.end(),
                                 [](const auto& r) { return r->actor < 0 && !r->batch; });
  if (!waiting || !stuck) {
    unsendable_since_ms_ = -1;
  } else if (unsendable_since_ms_ < 0) {
    unsendable_since_ms_ = now;
  } else if (now - unsendable_since_ms_ > options_.request_timeout.count()) {
    spdlog::warn("no data actor of {} reachable for {} ms (down, or CURVE keys refused?)",
                 fmt::join(options_.endpoints, ", "), now - unsendable_since_ms_);
    unsendable_since_ms_ = now;  // warn again one timeout later
  }
}

bool RemoteBatchSource::send(Actor& actor, const Request& request) {
  zmq::message_t frame = writer_.make(0, [&](wire::Envelope::Builder env) {
    auto out = env.getBody().initBatchRequest();
    out.setBatchId(request.id);
    auto indices = out.initIndices(static_cast<unsigned>(request.indices.size()));
    auto seeds = out.initSeeds(static_cast<unsigned>(request.seeds.size()));
    for (unsigned i = 0; i < indices.size(); ++i) {
      indices.set(i, request.indices[i]);
      seeds.set(i, request.seeds[i]);
    }
  });
  // Not connected (immediate): the request waits for this or another actor.
  return actor.socket->send(frame, zmq::send_flags::dontwait).has_value();
}

void RemoteBatchSource::release(Request& request, int avoid) {
  if (request.actor >= 0) --actors_[static_cast<size_t>(request.actor)]->in_flight;
  request.actor = -1;
  request.avoid = avoid;
  ++resent_;
}

void RemoteBatchSource::receive(size_t index, int64_t now) {
  Actor& actor = *actors_[index];
  for (int n = 0; n < 64; ++n) {
    wire::Received r =
        wire::recv_message(*actor.socket, options_.expect, zmq::recv_flags::dontwait);
    if (r.status == wire::RecvStatus::kNothing) return;
    if (r.status == wire::RecvStatus::kRefused) {
      drops_.refused(actor.endpoint, r.why);
      continue;
    }
    const auto env = r.message->envelope();
    if (r.message->kind() != Body::BATCH || env.getSender().getRole() != wire::Role::DATA) {
      drops_.refused(actor.endpoint,
                     fmt::format("a {} message from a {}; learners take only Batch from data "
                                 "actors here",
                                 wire::kind_name(r.message->kind()),
                                 control::role_name(env.getSender().getRole())));
      continue;
    }
    actor.progress_ms = now;  // it answers: alive
    actor.suspect = false;
    const auto in = env.getBody().getBatch();
    const uint64_t id = in.getBatchId();
    if (pending_.empty() || id < pending_.front()->id ||
        id - pending_.front()->id >= pending_.size())
      continue;  // stale: a batch already taken, or never asked for
    Request& request = *pending_[static_cast<size_t>(id - pending_.front()->id)];
    if (request.batch) continue;  // a duplicate of a re-sent request
    std::string why;
    std::optional<data::SslBatch> batch = read_batch(in, options_.views, options_.batch_size, why);
    if (!batch) {
      drops_.refused(actor.endpoint, why);
      release(request, static_cast<int>(index));  // ask again, preferably elsewhere
      continue;
    }
    request.batch = std::move(batch);
    if (request.actor >= 0) --actors_[static_cast<size_t>(request.actor)]->in_flight;
    request.actor = -1;
  }
}

void RemoteBatchSource::expire(int64_t now) {
  for (size_t i = 0; i < actors_.size(); ++i) {
    Actor& a = *actors_[i];
    if (a.in_flight == 0 || now - a.progress_ms <= options_.request_timeout.count()) continue;
    spdlog::warn(
        "data actor {} answered none of its {} request(s) for {} ms: re-dialing it, "
        "they go to another",
        a.endpoint, a.in_flight, now - a.progress_ms);
    for (auto& r : pending_) {
      if (r->actor == static_cast<int>(i)) release(*r, static_cast<int>(i));
    }
    a.in_flight = 0;
    a.suspect = true;
    dial(a);  // a fresh socket: no late answer of the old one is waited for
  }
}

}  // namespace saccade::workers
