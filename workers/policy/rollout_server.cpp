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

namespace saccade::workers {
namespace {

using Body = wire::Envelope::Body;
constexpr int64_t kPollMs = 50;             // idle wait between calls of stopping()
constexpr uint32_t kMaxTraceLength = 4096;  // steps and group size a request may ask for
constexpr size_t kEnvelopeBytes = 4096;     // header, names and shapes around a group's tensors

GazeSource from_wire(wire::GazeSource source) {
  switch (source) {
    case wire::GazeSource::SAMPLE:
      return GazeSource::kPolicySample;
    case wire::GazeSource::MODE:
      return GazeSource::kPolicyMode;
    default:
      return GazeSource::kRandom;
  }
}

}  // namespace

struct RolloutServer::Impl {
  Impl(model::FovealBackboneImpl& bb, const TaskHead& h, const model::PolicyOptions& po,
       std::shared_ptr<const data::Dataset> ds, data::ViewOptions v, RolloutServerOptions o)
      : backbone(bb),
        policy(po),
        dataset(std::move(ds)),
        views(std::move(v)),
        options(std::move(o)),
        rollouts(backbone, h, *dataset, views),
        router(context, zmq::socket_type::router),
        writer(options.sender) {}

  model::FovealBackboneImpl& backbone;  // borrowed, frozen
  model::GazePolicy policy;             // owned: the learner's weights of `version`
  std::optional<uint64_t> version;      // none until the first Weights
  std::shared_ptr<const data::Dataset> dataset;
  data::ViewOptions views;
  RolloutServerOptions options;
  LocalRollouts rollouts;  // borrows backbone and *dataset above
  zmq::context_t context;  // own context: its ZAP handler is this server's
  std::optional<control::ZapHandler> zap;
  zmq::socket_t router;
  std::string bound;
  control::EnvelopeWriter writer;
  control::DropLog drops;
};

RolloutServer::RolloutServer(model::FovealBackboneImpl& backbone, const TaskHead& head,
                             const model::PolicyOptions& policy_options,
                             std::shared_ptr<const data::Dataset> dataset, data::ViewOptions views,
                             RolloutServerOptions options)
    : impl_(std::make_unique<Impl>(backbone, head, policy_options, std::move(dataset),
                                   std::move(views), std::move(options))) {
  Impl& s = *impl_;
  s.policy->to(backbone.parameters().front().device());
  for (auto& p : s.policy->parameters()) p.set_requires_grad(false);
  if (s.options.security.curve) s.zap.emplace(s.context, s.options.security.client.public_key);
  control::configure_server(s.router, s.options.security);
  if (s.options.expect.max_frame_bytes > 0)
    s.router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(s.options.expect.max_frame_bytes));
  s.bound = control::bind_router(s.router, s.options.endpoint);
  spdlog::info("rollout actor serving {} images on {} (CURVE {}, {} thread(s))", s.dataset->size(),
               s.bound, s.options.security.curve ? "on" : "off", s.options.threads);
}

RolloutServer::~RolloutServer() = default;

std::string RolloutServer::endpoint() const {
  return impl_->bound;
}

void RolloutServer::serve(const std::function<bool()>& stopping) {
  Impl& s = *impl_;
  auto refuse = [&](const std::string& from, const std::string& why) {
    ++dropped_;
    s.drops.refused(from, why);
  };
  auto send = [&](zmq::message_t& identity, zmq::message_t reply) {
    zmq::message_t id;
    id.copy(identity);
    return s.router.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait).has_value() &&
           s.router.send(reply, zmq::send_flags::dontwait).has_value();
  };
  while (!stopping()) {
    std::vector<zmq::pollitem_t> items = {{s.router.handle(), 0, ZMQ_POLLIN, 0}};
    if (s.zap) items.push_back({s.zap->socket().handle(), 0, ZMQ_POLLIN, 0});
    control::poll_interruptible(items.data(), items.size(), std::chrono::milliseconds(kPollMs));
    if (s.zap && (items[1].revents & ZMQ_POLLIN)) s.zap->handle_one();
    if (!(items[0].revents & ZMQ_POLLIN)) continue;

    std::optional<control::RoutedFrame> routed = control::recv_routed(s.router, s.options.expect);
    if (!routed) continue;
    wire::Received& r = routed->received;
    if (r.status != wire::RecvStatus::kOk) {
      refuse(routed->from, r.why);
      continue;
    }
    const auto env = r.message->envelope();
    const std::string sender = fmt::format("{} {}", control::role_name(env.getSender().getRole()),
                                           env.getSender().getRank());
    if (r.message->kind() == Body::WEIGHTS) {
      const auto weights = env.getBody().getWeights();
      const auto bytes = weights.getSafetensors();
      try {
        model::load_modules(
            {{"", s.policy.ptr().get()}},
            std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
        s.version = weights.getVersion();
      } catch (const std::exception& e) {
        refuse(sender, fmt::format("policy weights of version {} that do not fit this job's "
                                   "policy: {}",
                                   weights.getVersion(), e.what()));
      }
      continue;
    }
    if (r.message->kind() != Body::ROLLOUT_REQUEST) {
      refuse(sender, fmt::format("a {} message; rollout actors take only Weights and "
                                 "RolloutRequest",
                                 wire::kind_name(r.message->kind())));
      continue;
    }
    const auto request = env.getBody().getRolloutRequest();
    const auto ids = request.getImageIds();
    const auto seeds = request.getSeeds();
    const uint32_t group = request.getGroupSize(), steps = request.getSteps();
    const GazeSource source = from_wire(request.getSource());
    const RolloutShape shape{steps, group, s.backbone.options().n_state,
                             s.backbone.options().width};
    std::string problem;
    if (ids.size() < 1 || seeds.size() != ids.size()) {
      problem = fmt::format("{} images with {} seeds (one seed each, at least one image)",
                            ids.size(), seeds.size());
    } else if (group < 1 || group > kMaxTraceLength || steps < 1 || steps > kMaxTraceLength) {
      problem =
          fmt::format("{} traces of {} glimpses (1 .. {} each)", group, steps, kMaxTraceLength);
    } else if (source == GazeSource::kPolicySample &&
               !(request.getStd() > 0 && std::isfinite(request.getStd()))) {
      problem = fmt::format("a mixture std of {} (expected > 0)", request.getStd());
    } else if (s.options.expect.max_frame_bytes > 0 &&
               rollout_group_bytes(shape) + kEnvelopeBytes > s.options.expect.max_frame_bytes) {
      problem = fmt::format("groups of {} bytes, over cluster.max_message_bytes ({})",
                            rollout_group_bytes(shape) + kEnvelopeBytes,
                            s.options.expect.max_frame_bytes);
    }
    for (uint64_t id : ids) {
      if (problem.empty() && id >= static_cast<uint64_t>(s.dataset->size()))
        problem = fmt::format("image {} outside the dataset's [0, {})", id, s.dataset->size());
    }
    if (!problem.empty()) {
      refuse(sender, fmt::format("a rollout request {} of {}", request.getRequestId(), problem));
      continue;
    }
    if (source != GazeSource::kRandom && s.version != request.getPolicyVersion()) {
      // Not an error of the learner's: this actor restarted or missed the weights.
      zmq::message_t nack = s.writer.make(0, [&](wire::Envelope::Builder out) {
        auto ack = out.getBody().initAck();
        ack.setSeq(env.getSeq());
        ack.setOk(false);
        ack.setError(fmt::format("no policy weights of version {} (holding {})",
                                 request.getPolicyVersion(),
                                 s.version ? std::to_string(*s.version) : "none"));
      });
      send(routed->identity, std::move(nack));
      continue;
    }

    RolloutBatch batch;
    batch.policy_version = request.getPolicyVersion();
    for (uint64_t id : ids) batch.indices.push_back(static_cast<int64_t>(id));
    batch.trace.steps = steps;
    batch.trace.group = group;
    batch.trace.source = source;
    batch.trace.std = source == GazeSource::kPolicySample ? request.getStd() : 1.0;
    for (uint64_t seed : seeds) batch.trace.image_seeds.push_back(seed);
    batch.trace.threads = s.options.threads;
    const Traces traces = s.rollouts.run(*s.policy, batch);
    ++requests_;  // counted before the answers leave, so a peer that has them sees the count
    traces_ += static_cast<uint64_t>(batch.indices.size()) * group;
    for (size_t b = 0; b < batch.indices.size(); ++b) {
      zmq::message_t reply = s.writer.make(0, [&](wire::Envelope::Builder out) {
        auto g = out.getBody().initRolloutGroup();
        g.setPolicyVersion(batch.policy_version);
        g.setImageId(ids[static_cast<unsigned>(b)]);
        g.setRequestId(request.getRequestId());
        write_rollout_group(traces, static_cast<int64_t>(b), group, g);
      });
      if (!send(routed->identity, std::move(reply)))
        spdlog::warn("could not answer rollout request {} of {}", request.getRequestId(), sender);
    }
  }
}

}  // namespace saccade::workers
