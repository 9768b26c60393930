#include "workers/policy/rollout_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "model/policy.h"
#include "model/weights.h"

namespace saccade::workers {
namespace {
using Body = wire::Envelope::Body;
constexpr int64_t kMaxWaitMs = 100;  // longest wait between calls of stopping()
constexpr int kMaxRefusals = 3;      // a part refused this often by one actor is an error

wire::GazeSource to_wire(GazeSource source) {
  switch (source) {
    case GazeSource::kPolicySample:
      return wire::GazeSource::SAMPLE;
    case GazeSource::kPolicyMode:
      return wire::GazeSource::MODE;
    default:
      return wire::GazeSource::RANDOM;
  }
}
}  // namespace

struct RolloutClient::Actor {
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;  // owned; replaced when re-dialed
  std::optional<uint64_t> version;        // the policy version it was sent last
};

struct RolloutClient::Part {
  size_t first = 0, count = 0;  // images [first, first + count) of the batch
  size_t actor = 0;
  uint64_t request_id = 0;  // of its latest send; answers to older sends are stale
  uint64_t seq = 0;         // the envelope seq of that request (refusals name it)
  int64_t progress_ms = 0;  // last send or answer
  int refusals = 0;
  bool sent = false;  // its latest request left; false: waiting for the actor's connection
  std::vector<std::optional<Traces>> groups;  // per image
  size_t received = 0;
};

RolloutClient::RolloutClient(RolloutClientOptions options)
    : options_(std::move(options)), writer_(options_.sender) {
  if (options_.endpoints.empty())
    throw std::invalid_argument("rollouts: no rollout actor endpoint");
  if (options_.n_state < 1 || options_.width < 1)
    throw std::invalid_argument("rollouts: n_state and width must be >= 1");
  if (options_.request_timeout.count() < 1)
    throw std::invalid_argument(fmt::format("rollouts: request_timeout must be >= 1 ms, got {}",
                                            options_.request_timeout.count()));
  for (const std::string& endpoint : options_.endpoints) {
    auto actor = std::make_unique<Actor>();
    actor->endpoint = endpoint;
    dial(*actor);
    actors_.push_back(std::move(actor));
  }
}

RolloutClient::~RolloutClient() = default;

void RolloutClient::dial(Actor& actor) {
  actor.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  control::configure_client(*actor.socket, options_.security, "");
  actor.socket->set(zmq::sockopt::linger, 0);
  if (options_.expect.max_frame_bytes > 0)
    actor.socket->set(zmq::sockopt::maxmsgsize,
                      static_cast<int64_t>(options_.expect.max_frame_bytes));
  actor.socket->connect(actor.endpoint);
  actor.version.reset();  // a fresh connection may reach a restarted actor
}

bool RolloutClient::send_part(Part& part, const RolloutBatch& batch, const std::string& weights) {
  Actor& actor = *actors_[part.actor];
  // Sockets are `immediate`: a send fails (EAGAIN) until the connection is up,
  // and the part waits for POLLOUT instead of queueing on a dead endpoint.
  const bool needs_policy = batch.trace.source != GazeSource::kRandom;
  if (needs_policy && actor.version != batch.policy_version) {
    zmq::message_t message = writer_.make(0, [&](wire::Envelope::Builder out) {
      auto w = out.getBody().initWeights();
      w.setVersion(batch.policy_version);
      w.setSafetensors(
          kj::arrayPtr(reinterpret_cast<const kj::byte*>(weights.data()), weights.size()));
    });
    if (!actor.socket->send(message, zmq::send_flags::dontwait)) return false;
    actor.version = batch.policy_version;
  }
  const uint64_t id = next_request_++;
  const uint64_t seq = writer_.next_seq();
  zmq::message_t message = writer_.make(0, [&](wire::Envelope::Builder out) {
    auto r = out.getBody().initRolloutRequest();
    r.setPolicyVersion(batch.policy_version);
    r.setRequestId(id);
    r.setGroupSize(static_cast<uint32_t>(batch.trace.group));
    r.setSteps(static_cast<uint32_t>(batch.trace.steps));
    r.setStd(batch.trace.std);
    r.setSource(to_wire(batch.trace.source));
    auto ids = r.initImageIds(static_cast<unsigned>(part.count));
    auto seeds = r.initSeeds(static_cast<unsigned>(part.count));
    for (size_t i = 0; i < part.count; ++i) {
      ids.set(static_cast<unsigned>(i), static_cast<uint64_t>(batch.indices[part.first + i]));
      seeds.set(static_cast<unsigned>(i), batch.trace.image_seeds[part.first + i]);
    }
  });
  if (!actor.socket->send(message, zmq::send_flags::dontwait)) return false;
  part.request_id = id;
  part.seq = seq;
  part.sent = true;
  return true;
}

Traces RolloutClient::run(model::GazePolicyImpl& policy, const RolloutBatch& batch) {
  const size_t B = batch.indices.size();
  if (B < 1 || batch.trace.image_seeds.size() != B)
    throw std::invalid_argument(
        fmt::format("rollouts: {} images with {} seeds", B, batch.trace.image_seeds.size()));
  const RolloutShape shape{batch.trace.steps, batch.trace.group, options_.n_state, options_.width};
  std::string weights;
  if (batch.trace.source != GazeSource::kRandom) {
    weights = model::save_modules({{"", &policy}});
    if (options_.expect.max_frame_bytes > 0 &&
        weights.size() + 4096 > options_.expect.max_frame_bytes)
      throw std::invalid_argument(fmt::format(
          "cluster.max_message_bytes: the policy's {} bytes of weights do not fit a frame of {}",
          weights.size(), options_.expect.max_frame_bytes));
  }
  const size_t k = std::min(actors_.size(), B);
  std::vector<Part> parts(k);
  for (size_t p = 0; p < k; ++p) {
    parts[p].first = p * B / k;
    parts[p].count = (p + 1) * B / k - parts[p].first;
    parts[p].groups.resize(parts[p].count);
    parts[p].actor = p;
    parts[p].progress_ms = control::steady_ms();
    send_part(parts[p], batch, weights);
  }
  auto resend = [&](Part& part, size_t actor, const std::string& why) {
    ++resent_;
    spdlog::warn("rollouts: {} images {}; sending them to {}", part.count, why,
                 actors_[actor]->endpoint);
    part.groups.assign(part.count, std::nullopt);
    part.received = 0;
    part.actor = actor;
    part.sent = false;
    part.progress_ms = control::steady_ms();
    send_part(part, batch, weights);
  };
  auto drop = [&](const std::string& from, const std::string& why) {
    ++dropped_;
    drops_.refused(from, why);
  };

  size_t done = 0;
  while (done < k) {
    if (options_.stopping && options_.stopping())
      throw std::runtime_error("rollouts interrupted: the learner is stopping");
    std::vector<zmq::pollitem_t> items;
    for (size_t a = 0; a < actors_.size(); ++a) {
      const bool to_send = std::any_of(parts.begin(), parts.end(),
                                       [&](const Part& p) { return p.actor == a && !p.sent; });
      items.push_back({actors_[a]->socket->handle(), 0,
                       static_cast<short>(ZMQ_POLLIN | (to_send ? ZMQ_POLLOUT : 0)), 0});
    }
    int64_t now = control::steady_ms();
    int64_t wait = kMaxWaitMs;
    for (const Part& p : parts) {
      if (p.received < p.count)
        wait = std::min(wait, p.progress_ms + options_.request_timeout.count() - now);
    }
    control::poll_interruptible(items.data(), items.size(),
                                std::chrono::milliseconds(std::max<int64_t>(wait, 0)));
    now = control::steady_ms();
    for (Part& p : parts) {
      if (!p.sent && (items[p.actor].revents & ZMQ_POLLOUT)) send_part(p, batch, weights);
    }
    for (size_t a = 0; a < actors_.size(); ++a) {
      if (!(items[a].revents & ZMQ_POLLIN)) continue;
      const std::string from = actors_[a]->endpoint;
      for (;;) {
        wire::Received r =
            wire::recv_message(*actors_[a]->socket, options_.expect, zmq::recv_flags::dontwait);
        if (r.status == wire::RecvStatus::kNothing) break;
        if (r.status == wire::RecvStatus::kRefused) {
          drop(from, r.why);
          continue;
        }
        const auto env = r.message->envelope();
        if (r.message->kind() == Body::ACK) {
          const auto ack = env.getBody().getAck();
          auto part = std::find_if(parts.begin(), parts.end(), [&](const Part& p) {
            return p.actor == a && p.seq == ack.getSeq() && p.received < p.count;
          });
          if (ack.getOk() || part == parts.end()) continue;  // stale
          if (++part->refusals > kMaxRefusals)
            throw std::runtime_error(fmt::format("rollouts: {} refused request {} {} times: {}",
                                                 from, part->request_id, part->refusals,
                                                 std::string(ack.getError())));
          actors_[a]->version.reset();
          resend(*part, a, fmt::format("were refused ({})", std::string(ack.getError())));
          continue;
        }
        if (r.message->kind() != Body::ROLLOUT_GROUP) {
          drop(from, fmt::format("a {} message; a learner takes only RolloutGroup and Ack from "
                                 "rollout actors",
                                 wire::kind_name(r.message->kind())));
          continue;
        }
        const auto g = env.getBody().getRolloutGroup();
        auto part = std::find_if(parts.begin(), parts.end(), [&](const Part& p) {
          return p.actor == a && p.request_id == g.getRequestId();
        });
        if (part == parts.end() || part->received == part->count) continue;  // stale
        size_t slot = part->count;
        for (size_t i = 0; i < part->count; ++i) {
          if (static_cast<uint64_t>(batch.indices[part->first + i]) == g.getImageId() &&
              !part->groups[i])
            slot = i;
        }
        if (slot == part->count || g.getPolicyVersion() != batch.policy_version) {
          drop(from, fmt::format("a group of image {} (version {}) that request {} did not ask "
                                 "for, or a duplicate",
                                 g.getImageId(), g.getPolicyVersion(), g.getRequestId()));
          continue;
        }
        std::string why;
        std::optional<Traces> traces = read_rollout_group(g, shape, why);
        if (!traces) {
          drop(from, why);
          resend(*part, a, "came back malformed");
          continue;
        }
        part->groups[slot] = std::move(*traces);
        part->progress_ms = now;
        if (++part->received == part->count) ++done;
      }
    }
    for (Part& p : parts) {
      if (p.received == p.count || now - p.progress_ms < options_.request_timeout.count()) continue;
      const size_t silent = p.actor;
      dial(*actors_[silent]);  // a fresh socket drops whatever it still queues
      resend(p, (silent + 1) % actors_.size(),
             fmt::format("got no answer from {} for {} ms", actors_[silent]->endpoint,
                         options_.request_timeout.count()));
    }
  }
  std::vector<Traces> all;
  all.reserve(B);
  for (Part& p : parts)
    for (auto& g : p.groups) all.push_back(std::move(*g));
  return concat_traces(all);
}

}  // namespace saccade::workers
