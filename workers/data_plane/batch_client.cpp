#include "workers/data_plane/batch_client.h"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <utility>

#include "workers/data_plane/batch_codec.h"

namespace saccade::data_plane {

namespace {
using Body = wire::Envelope::Body;
}  // namespace

struct RemoteBatchSource::Request {
  uint64_t id = 0;
  std::vector<int64_t> indices;         // dataset index per image
  std::vector<uint64_t> seeds;          // view seed per image
  data::DataPosition after;             // the sampler's position after this batch
  std::optional<data::SslBatch> batch;  // the answer, once it came
};

RemoteBatchSource::RemoteBatchSource(RemoteSourceOptions options, data::DataPosition start)
    : options_(std::move(options)), sampler_(options_.shard) {
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
  const std::string frames =
      frame_limit_problem(options_.views, options_.batch_size, options_.expect.max_frame_bytes,
                          fmt::format("a batch of {} images", options_.batch_size));
  if (!frames.empty()) throw std::invalid_argument(frames);
  sampler_.seek(start);
  client_ = std::make_unique<runtime::RequestClient>(
      runtime::RequestClientOptions{options_.endpoints, options_.queue_depth,
                                    options_.request_timeout, options_.security, options_.sender,
                                    options_.expect, "data actor"},
      static_cast<runtime::RequestProtocol&>(*this));
}

RemoteBatchSource::~RemoteBatchSource() = default;

std::optional<data::LoadedBatch> RemoteBatchSource::next(const std::function<bool()>& stopping) {
  refill();
  if (!client_->run_until([&] { return pending_.front()->batch.has_value(); }, stopping))
    return std::nullopt;
  std::unique_ptr<Request> done = std::move(pending_.front());
  pending_.pop_front();
  skipped_corrupt_ += static_cast<uint64_t>(done->batch->skipped_corrupt);
  data::LoadedBatch loaded;
  loaded.batch = std::make_unique<data::SslBatch>(std::move(*done->batch));
  loaded.position = done->after;
  loaded.wire_bytes = batch_payload_bytes(*loaded.batch);
  return loaded;
}

void RemoteBatchSource::refill() {
  const size_t window = client_->peers() * static_cast<size_t>(options_.queue_depth);
  while (pending_.size() < window) {
    auto r = std::make_unique<Request>();
    r->id = next_id_++;
    for (int64_t i = 0; i < options_.batch_size; ++i) {
      r->seeds.push_back(data::view_seed_at(options_.seed, sampler_, sampler_.position()));
      r->indices.push_back(sampler_.next());
    }
    r->after = sampler_.position();
    client_->submit(r->id);
    pending_.push_back(std::move(r));
  }
}

RemoteBatchSource::Request* RemoteBatchSource::find(uint64_t id) {
  if (pending_.empty() || id < pending_.front()->id || id - pending_.front()->id >= pending_.size())
    return nullptr;
  return pending_[static_cast<size_t>(id - pending_.front()->id)].get();
}

bool RemoteBatchSource::send(uint64_t id, size_t /*peer*/, runtime::PeerLink& link) {
  const Request& request = *find(id);
  return link.send([&](wire::Envelope::Builder env) {
    auto out = env.getBody().initBatchRequest();
    out.setBatchId(request.id);
    auto indices = out.initIndices(static_cast<unsigned>(request.indices.size()));
    auto seeds = out.initSeeds(static_cast<unsigned>(request.seeds.size()));
    for (unsigned i = 0; i < indices.size(); ++i) {
      indices.set(i, request.indices[i]);
      seeds.set(i, request.seeds[i]);
    }
  });
}

runtime::Answer RemoteBatchSource::accept(size_t /*peer*/, wire::Message&& message) {
  using Kind = runtime::Answer::Kind;
  const auto env = message.envelope();
  if (message.kind() != Body::BATCH || env.getSender().getRole() != wire::Role::DATA) {
    return {Kind::kIgnored, 0, "",
            fmt::format("a {} message from a {}; learners take only Batch from data actors here",
                        wire::kind_name(message.kind()),
                        control::role_name(env.getSender().getRole()))};
  }
  const auto in = env.getBody().getBatch();
  Request* request = find(in.getBatchId());
  // Stale (a batch already taken, or never asked for), or a duplicate of a re-sent request.
  if (request == nullptr || request->batch) return {};
  std::string why;
  // The batch reads its pixels in place and keeps the frame they are in (`in` stays valid:
  // moving the message does not move the frame it reads).
  auto frame = std::make_shared<const wire::Message>(std::move(message));
  std::optional<data::SslBatch> batch =
      read_batch(in, options_.views, options_.batch_size, why, frame);
  if (!batch) return {Kind::kRetry, request->id, "came back malformed", why};
  request->batch = std::move(batch);
  return {Kind::kDone, request->id, "", ""};
}

}  // namespace saccade::data_plane
