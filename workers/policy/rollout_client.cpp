#include "workers/policy/rollout_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "model/policy.h"
#include "model/weights.h"

namespace saccade::policy {
namespace {
using Body = wire::Envelope::Body;
constexpr int kMaxRefusals = 3;  // a part refused this often by one actor is an error
// Longest wait of the first batch for every actor's connection.
constexpr std::chrono::milliseconds kConnectGrace{10000};

wire::GazeSource to_wire(GazeSource source) {
  switch (source) {
    case GazeSource::kPolicySample:
      return wire::GazeSource::SAMPLE;
    case GazeSource::kPolicyMode:
      return wire::GazeSource::MODE;
    case GazeSource::kScan:
      return wire::GazeSource::SCAN;
    default:
      return wire::GazeSource::RANDOM;
  }
}
}  // namespace

struct RolloutClient::Part {
  size_t first = 0, count = 0;  // images [first, first + count) of the batch
  size_t peer = 0;              // the actor of its latest send
  uint64_t seq = 0;             // the envelope seq of that send (refusals name it)
  int refusals = 0;
  std::vector<std::optional<Traces>> groups;  // per image, of the latest send
  size_t received = 0;
};

RolloutClient::RolloutClient(RolloutClientOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty())
    throw std::invalid_argument("rollouts: no rollout actor endpoint");
  if (options_.n_state < 1 || options_.width < 1)
    throw std::invalid_argument("rollouts: n_state and width must be >= 1");
  if (options_.request_timeout.count() < 1)
    throw std::invalid_argument(fmt::format("rollouts: request_timeout must be >= 1 ms, got {}",
                                            options_.request_timeout.count()));
  versions_.resize(options_.endpoints.size());
  // One part per actor at a time: a part is as large as the batch allows.
  client_ = std::make_unique<runtime::RequestClient>(
      runtime::RequestClientOptions{options_.endpoints, 1, options_.request_timeout,
                                    options_.security, options_.sender, options_.expect,
                                    "rollout actor"},
      static_cast<runtime::RequestProtocol&>(*this));
}

RolloutClient::~RolloutClient() = default;

RolloutClient::Part* RolloutClient::find(uint64_t id) {
  if (id < first_id_ || id - first_id_ >= parts_.size()) return nullptr;
  return &parts_[static_cast<size_t>(id - first_id_)];
}

void RolloutClient::redialed(size_t peer) {
  versions_[peer].reset();  // a fresh connection may reach a restarted actor
}

bool RolloutClient::send(uint64_t id, size_t peer, runtime::PeerLink& link) {
  Part& part = *find(id);
  const RolloutBatch& batch = *batch_;
  if (needs_policy(batch.trace.source) && versions_[peer] != batch.policy_version) {
    const bool sent = link.send([&](wire::Envelope::Builder out) {
      auto w = out.getBody().initWeights();
      w.setVersion(batch.policy_version);
      w.setSafetensors(
          kj::arrayPtr(reinterpret_cast<const kj::byte*>(weights_->data()), weights_->size()));
    });
    if (!sent) return false;
    versions_[peer] = batch.policy_version;
  }
  const uint64_t seq = link.next_seq();
  const bool sent = link.send([&](wire::Envelope::Builder out) {
    auto r = out.getBody().initRolloutRequest();
    r.setPolicyVersion(batch.policy_version);
    r.setRequestId(id);
    r.setGroupSize(static_cast<uint32_t>(batch.trace.group));
    r.setSteps(static_cast<uint32_t>(batch.trace.steps));
    r.setStd(batch.trace.std);
    r.setSource(to_wire(batch.trace.source));
    r.setStateBlind(batch.trace.state_blind);
    r.setScale(batch.scale);
    r.setBilinearUpscale(batch.bilinear_upscale);
    auto ids = r.initImageIds(static_cast<unsigned>(part.count));
    auto seeds = r.initSeeds(static_cast<unsigned>(part.count));
    for (size_t i = 0; i < part.count; ++i) {
      ids.set(static_cast<unsigned>(i), static_cast<uint64_t>(batch.indices[part.first + i]));
      seeds.set(static_cast<unsigned>(i), batch.trace.image_seeds[part.first + i]);
    }
  });
  if (!sent) return false;
  part.peer = peer;
  part.seq = seq;
  part.groups.assign(part.count, std::nullopt);  // a re-send starts the part over
  part.received = 0;
  return true;
}

runtime::Answer RolloutClient::accept(size_t peer, wire::Message&& message) {
  using Kind = runtime::Answer::Kind;
  const auto env = message.envelope();
  if (message.kind() == Body::ACK) {
    const auto ack = env.getBody().getAck();
    auto part = std::find_if(parts_.begin(), parts_.end(), [&](const Part& p) {
      return p.peer == peer && p.seq == ack.getSeq() && p.received < p.count;
    });
    if (ack.getOk() || part == parts_.end()) return {};  // stale
    const uint64_t id = first_id_ + static_cast<uint64_t>(part - parts_.begin());
    if (++part->refusals > kMaxRefusals)
      throw std::runtime_error(fmt::format("rollouts: {} refused request {} {} times: {}",
                                           options_.endpoints[peer], id, part->refusals,
                                           std::string(ack.getError())));
    versions_[peer].reset();  // it lacks the weights: they go with the next send
    return {Kind::kRetry, id, fmt::format("was refused ({})", std::string(ack.getError())), ""};
  }
  if (message.kind() != Body::ROLLOUT_GROUP) {
    return {Kind::kIgnored, 0, "",
            fmt::format("a {} message; a learner takes only RolloutGroup and Ack from rollout "
                        "actors",
                        wire::kind_name(message.kind()))};
  }
  const auto g = env.getBody().getRolloutGroup();
  Part* part = find(g.getRequestId());
  if (part == nullptr || part->peer != peer || part->received == part->count) return {};  // stale
  const RolloutBatch& batch = *batch_;
  size_t slot = part->count;
  for (size_t i = 0; i < part->count; ++i) {
    if (static_cast<uint64_t>(batch.indices[part->first + i]) == g.getImageId() && !part->groups[i])
      slot = i;
  }
  if (slot == part->count || g.getPolicyVersion() != batch.policy_version) {
    return {Kind::kIgnored, 0, "",
            fmt::format("a group of image {} (version {}) that request {} did not ask for, or a "
                        "duplicate",
                        g.getImageId(), g.getPolicyVersion(), g.getRequestId())};
  }
  const RolloutShape shape{batch.trace.steps, batch.trace.group, options_.n_state, options_.width};
  std::string why;
  std::optional<Traces> traces = read_rollout_group(g, shape, why);
  if (!traces) return {Kind::kRetry, g.getRequestId(), "came back malformed", why};
  part->groups[slot] = std::move(*traces);
  const bool done = ++part->received == part->count;
  return {done ? Kind::kDone : Kind::kProgress, g.getRequestId(), "", ""};
}

Traces RolloutClient::run(model::GazePolicyImpl* policy, const RolloutBatch& batch) {
  const size_t B = batch.indices.size();
  if (B < 1 || batch.trace.image_seeds.size() != B)
    throw std::invalid_argument(
        fmt::format("rollouts: {} images with {} seeds", B, batch.trace.image_seeds.size()));
  std::string weights;
  if (needs_policy(batch.trace.source)) {
    if (policy == nullptr)
      throw std::invalid_argument("rollouts: gazes drawn from a policy, but no policy was given");
    weights = model::save_modules({{"", policy}});
    if (options_.expect.max_frame_bytes > 0 &&
        weights.size() + 4096 > options_.expect.max_frame_bytes)
      throw std::invalid_argument(fmt::format(
          "cluster.max_message_bytes: the policy's {} bytes of weights do not fit a frame of {}",
          weights.size(), options_.expect.max_frame_bytes));
  }
  auto stopping = [&] { return options_.stopping && options_.stopping(); };
  if (!warmed_up_) {
    // Actors of a starting job come up at different times: give the late ones a moment.
    warmed_up_ = true;
    if (!client_->wait_connected(
            std::min<std::chrono::milliseconds>(options_.request_timeout, kConnectGrace), stopping))
      spdlog::warn("rollouts: not every rollout actor is reachable yet; starting without it");
  }
  client_->clear();  // what an interrupted run() left unanswered
  batch_ = &batch;
  weights_ = &weights;
  const size_t k = std::min(client_->peers(), B);
  parts_.assign(k, Part{});
  first_id_ = next_id_;
  next_id_ += k;
  for (size_t p = 0; p < k; ++p) {
    parts_[p].first = p * B / k;
    parts_[p].count = (p + 1) * B / k - parts_[p].first;
    client_->submit(first_id_ + p);
  }
  auto all_done = [&] {
    return std::all_of(parts_.begin(), parts_.end(),
                       [](const Part& p) { return p.received == p.count; });
  };
  const bool finished = client_->run_until(all_done, stopping);
  batch_ = nullptr;
  weights_ = nullptr;
  if (!finished) throw std::runtime_error("rollouts interrupted: the learner is stopping");
  std::vector<Traces> all;
  all.reserve(B);
  for (Part& p : parts_)
    for (auto& g : p.groups) all.push_back(std::move(*g));
  return concat_traces(all);
}

}  // namespace saccade::policy
