#include "workers/policy/rollout_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "model/policy.h"
#include "model/weights.h"
#include "workers/policy/rollout_codec.h"
#include "workers/policy/rollout_source.h"

namespace saccade::policy {
namespace {

using Body = wire::Envelope::Body;
constexpr uint32_t kMaxTraceLength = 4096;  // steps and group size a request may ask for
constexpr size_t kEnvelopeBytes = 4096;     // header, names and shapes around a group's tensors

GazeSource from_wire(wire::GazeSource source) {
  switch (source) {
    case wire::GazeSource::SAMPLE:
      return GazeSource::kPolicySample;
    case wire::GazeSource::MODE:
      return GazeSource::kPolicyMode;
    case wire::GazeSource::SCAN:
      return GazeSource::kScan;
    default:
      return GazeSource::kRandom;
  }
}

}  // namespace

struct RolloutServer::Impl {
  Impl(model::FovealBackboneImpl& bb, const probe::TaskHead& h, const model::PolicyOptions& po,
       std::shared_ptr<const data::Dataset> ds, data::ViewOptions v, RolloutServerOptions o)
      : backbone(bb),
        policy(po),
        dataset(std::move(ds)),
        views(std::move(v)),
        options(std::move(o)),
        rollouts(backbone, h, *dataset, views),
        server(options) {}

  model::FovealBackboneImpl& backbone;  // borrowed, frozen
  model::GazePolicy policy;             // owned: the learner's weights of `version`
  std::optional<uint64_t> version;      // none until the first Weights
  std::shared_ptr<const data::Dataset> dataset;
  data::ViewOptions views;
  RolloutServerOptions options;
  LocalRollouts rollouts;  // borrows backbone and *dataset above
  runtime::RequestServer server;
};

RolloutServer::RolloutServer(model::FovealBackboneImpl& backbone, const probe::TaskHead& head,
                             const model::PolicyOptions& policy_options,
                             std::shared_ptr<const data::Dataset> dataset, data::ViewOptions views,
                             RolloutServerOptions options)
    : impl_(std::make_unique<Impl>(backbone, head, policy_options, std::move(dataset),
                                   std::move(views), std::move(options))) {
  Impl& s = *impl_;
  s.policy->to(backbone.parameters().front().device());
  for (auto& p : s.policy->parameters()) p.set_requires_grad(false);
  spdlog::info("rollout actor serving {} images on {} (CURVE {}, {} thread(s))", s.dataset->size(),
               s.server.endpoint(), s.options.security.curve ? "on" : "off", s.options.threads);
}

RolloutServer::~RolloutServer() = default;

std::string RolloutServer::endpoint() const {
  return impl_->server.endpoint();
}

uint64_t RolloutServer::dropped() const {
  return impl_->server.dropped();
}

void RolloutServer::serve(const std::function<bool()>& stopping) {
  Impl& s = *impl_;
  s.server.serve(stopping, [&](runtime::Exchange& ex) { handle(ex); });
}

void RolloutServer::handle(runtime::Exchange& ex) {
  Impl& s = *impl_;
  const auto env = ex.envelope();
  const std::string& sender = ex.sender();
  if (ex.message().kind() == Body::WEIGHTS) {
    const auto weights = env.getBody().getWeights();
    const auto bytes = weights.getSafetensors();
    try {
      model::load_modules(
          {{"", s.policy.ptr().get()}},
          std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
      s.version = weights.getVersion();
    } catch (const std::exception& e) {
      ex.refuse(
          fmt::format("policy weights of version {} that do not fit this job's "
                      "policy: {}",
                      weights.getVersion(), e.what()));
    }
    return;
  }
  if (ex.message().kind() != Body::ROLLOUT_REQUEST) {
    ex.refuse(
        fmt::format("a {} message; rollout actors take only Weights and "
                    "RolloutRequest",
                    wire::kind_name(ex.message().kind())));
    return;
  }
  const auto request = env.getBody().getRolloutRequest();
  const auto ids = request.getImageIds();
  const auto seeds = request.getSeeds();
  const uint32_t group = request.getGroupSize(), steps = request.getSteps();
  const GazeSource source = from_wire(request.getSource());
  const RolloutShape shape{steps, group, s.backbone.options().n_state, s.backbone.options().width};
  std::string problem;
  if (ids.size() < 1 || seeds.size() != ids.size()) {
    problem = fmt::format("{} images with {} seeds (one seed each, at least one image)", ids.size(),
                          seeds.size());
  } else if (group < 1 || group > kMaxTraceLength || steps < 1 || steps > kMaxTraceLength) {
    problem = fmt::format("{} traces of {} glimpses (1 .. {} each)", group, steps, kMaxTraceLength);
  } else if (source == GazeSource::kPolicySample &&
             !(request.getStd() > 0 && std::isfinite(request.getStd()))) {
    problem = fmt::format("a mixture std of {} (expected > 0)", request.getStd());
  } else if (!(request.getScale() > 0 && request.getScale() <= kMaxRolloutScale)) {
    problem = fmt::format("images resized by {} (expected (0, {}])", request.getScale(),
                          kMaxRolloutScale);
  } else if (s.options.expect.max_frame_bytes > 0 &&
             rollout_group_bytes(shape) + kEnvelopeBytes > s.options.expect.max_frame_bytes) {
    problem =
        fmt::format("groups of {} bytes, over cluster.max_message_bytes ({})",
                    rollout_group_bytes(shape) + kEnvelopeBytes, s.options.expect.max_frame_bytes);
  }
  for (uint64_t id : ids) {
    if (problem.empty() && id >= static_cast<uint64_t>(s.dataset->size()))
      problem = fmt::format("image {} outside the dataset's [0, {})", id, s.dataset->size());
  }
  if (!problem.empty()) {
    ex.refuse(fmt::format("a rollout request {} of {}", request.getRequestId(), problem));
    return;
  }
  if (needs_policy(source) && s.version != request.getPolicyVersion()) {
    // Not an error of the learner's: this actor restarted or missed the weights.
    ex.reply([&](wire::Envelope::Builder out) {
      auto ack = out.getBody().initAck();
      ack.setSeq(env.getSeq());
      ack.setOk(false);
      ack.setError(fmt::format("no policy weights of version {} (holding {})",
                               request.getPolicyVersion(),
                               s.version ? std::to_string(*s.version) : "none"));
    });
    return;
  }

  RolloutBatch batch;
  batch.policy_version = request.getPolicyVersion();
  for (uint64_t id : ids) batch.indices.push_back(static_cast<int64_t>(id));
  batch.trace.steps = steps;
  batch.trace.group = group;
  batch.trace.source = source;
  batch.trace.std = source == GazeSource::kPolicySample ? request.getStd() : 1.0;
  batch.trace.state_blind = request.getStateBlind();
  batch.scale = request.getScale();
  batch.bilinear_upscale = request.getBilinearUpscale();
  for (uint64_t seed : seeds) batch.trace.image_seeds.push_back(seed);
  batch.trace.threads = s.options.threads;
  const Traces traces =
      (s.options.source ? *s.options.source : s.rollouts).run(s.policy.get(), batch);
  ++requests_;  // counted before the answers leave, so a peer that has them sees the count
  traces_ += static_cast<uint64_t>(batch.indices.size()) * group;
  for (size_t b = 0; b < batch.indices.size(); ++b) {
    const bool sent = ex.reply([&](wire::Envelope::Builder out) {
      auto g = out.getBody().initRolloutGroup();
      g.setPolicyVersion(batch.policy_version);
      g.setImageId(ids[static_cast<unsigned>(b)]);
      g.setRequestId(request.getRequestId());
      write_rollout_group(traces, static_cast<int64_t>(b), group, g);
    });
    if (!sent)
      spdlog::warn("could not answer rollout request {} of {}", request.getRequestId(), sender);
  }
}

}  // namespace saccade::policy
