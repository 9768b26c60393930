#include "coordinator/coordinator.h"

#include <fmt/format.h>
#include <kj/exception.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/metrics_log.h"
#include "control/checkpoint_transfer.h"
#include "control/control.h"
#include "control/placement.h"
#include "control/process.h"
#include "control/rendezvous_store.h"
#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"
#include "coordinator/metrics_http.h"
#include "coordinator/peer_messages.h"
#include "coordinator/stage_runner.h"
#include "coordinator/supervisor.h"

namespace saccade::coordinator {

std::filesystem::path coordinator_db_path(const JobConfig& config) {
  return std::filesystem::path(config.job.work_dir) / "coordinator.db";
}

namespace {

using Body = wire::Envelope::Body;

// No wait on the rendezvous store outlasts the longest timeout the learners are given.
control::RendezvousLimits rendezvous_limits(const JobConfig& config) {
  control::RendezvousLimits limits;
  limits.max_timeout_ms =
      1000 * std::max(config.cluster.collective_timeout_s, config.cluster.rendezvous_timeout_s);
  return limits;
}

const std::string& bind_host(const JobConfig& config, const CoordinatorOptions& options) {
  return options.bind_host.empty() ? config.cluster.coordinator_host : options.bind_host;
}

class Coordinator final : public PeerSender {
 public:
  Coordinator(const JobConfig& config, const CoordinatorOptions& options)
      : config_(config),
        signals_({SIGTERM, SIGINT, SIGHUP}),
        security_(control::load_security(config.security, true)),
        store_(coordinator_db_path(config)),
        job_(config, store_, control::steady_ms()),
        metrics_log_(
            (std::filesystem::path(config.job.work_dir) / config.logging.metrics_file).string()),
        router_(context_, zmq::socket_type::router),
        writer_({config.job.name, wire::Role::COORDINATOR, 0, ""}),
        expect_(control::expect_any_job(config)),
        stage_inputs_(config, store_.checkpoints("pretrain"), coordinator_db_path(config)),
        checkpoints_(config, job_, store_, stage_inputs_, *this),
        rendezvous_(rendezvous_limits(config)),
        messages_(config, job_, *this),
        stages_(config, job_, store_, stage_inputs_, messages_),
        supervisor_(config, job_, stages_, messages_, checkpoints_) {
    job_.load(control::steady_ms());
    stages_.begin_stage();
    if (security_.curve) zap_.emplace(context_, security_.client.public_key);
    control::configure_server(router_, security_);
    router_.set(zmq::sockopt::maxmsgsize, config.cluster.max_message_bytes);
    // A peer's full send queue answers EAGAIN instead of silently dropping the message:
    // checkpoint downloads wait for room (CheckpointService::pump), the rest is dropped.
    router_.set(zmq::sockopt::router_mandatory, 1);
    const std::string bind =
        fmt::format("tcp://{}:{}", bind_host(config, options), config.cluster.coordinator_port);
    control::bind_router(router_, bind);
    if (config.cluster.metrics_port > 0)
      metrics_.emplace(context_, fmt::format("tcp://{}:{}", bind_host(config, options),
                                             config.cluster.metrics_port));
    spdlog::info(
        "coordinator of job \"{}\" on {} (CURVE {}, metrics port {}), {} actors on {} nodes",
        config.job.name, bind, security_.curve ? "on" : "off", config.cluster.metrics_port,
        job_.actors.size(), job_.nodes.size());
  }

  int run() {
    if (job_.finished()) {
      spdlog::info("job \"{}\" already finished in {}; start it over with --fresh",
                   config_.job.name, config_.job.work_dir);
      stages_.skip_linger();
    }
    int64_t next_tick = 0;
    while (!stages_.done()) {
      std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                            {nullptr, signals_.fd(), ZMQ_POLLIN, 0}};
      if (zap_) items.push_back({zap_->socket().handle(), 0, ZMQ_POLLIN, 0});
      if (metrics_) items.push_back({metrics_->socket().handle(), 0, ZMQ_POLLIN, 0});
      // While a download waits for room in a learner's queue, come back within 1 ms.
      const int64_t wait =
          std::clamp<int64_t>(next_tick - control::steady_ms(), 0, checkpoints_.busy() ? 1 : 50);
      control::poll_interruptible(items.data(), items.size(), std::chrono::milliseconds(wait));
      if (items[0].revents & ZMQ_POLLIN) receive_all();
      if (items[1].revents & ZMQ_POLLIN) on_signal(signals_.take());
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) zap_->handle_one();
      if (metrics_ && (items.back().revents & ZMQ_POLLIN))
        metrics_->serve([this] { return status_prometheus(job_.status(control::steady_ms())); });
      checkpoints_.pump(control::steady_ms());
      checkpoints_.finish_commit();
      messages_.store_replies(rendezvous_.begin_generation(job_.generation));
      messages_.store_replies(rendezvous_.expire(control::steady_ms()));
      if (control::steady_ms() >= next_tick) {
        tick(control::steady_ms());
        next_tick = control::steady_ms() + config_.cluster.heartbeat_interval_ms;
      }
      job_.flush();
    }
    job_.flush(true);
    spdlog::info("job \"{}\" {}{}", config_.job.name, job_phase_name(job_.state),
                 job_.reason.empty() ? "" : ": " + job_.reason);
    if (job_.state == JobPhase::kFailed) return kExitJobFailed;
    return job_.finished() ? kExitJobFinished : kExitJobDrained;
  }

 private:
  // --- receiving -----------------------------------------------------------

  void receive_all() {
    for (int i = 0; i < 1000; ++i) {
      zmq::message_t identity;
      if (!router_.recv(identity, zmq::recv_flags::dontwait)) return;
      const std::string id = identity.to_string();
      if (!identity.more()) {
        drops_.refused(id, "a frame without payload");
        continue;
      }
      zmq::message_t frame;
      if (!router_.recv(frame, zmq::recv_flags::dontwait)) continue;
      int extra = 0;
      for (zmq::message_t rest; frame.more() && router_.recv(rest, zmq::recv_flags::dontwait);) {
        frame.swap(rest);  // drain and refuse multi-part senders
        ++extra;
      }
      if (extra > 0) {
        drops_.refused(id, fmt::format("multi-part message with {} extra parts", extra));
        continue;
      }
      wire::Received r = wire::open_frame(std::move(frame), expect_);
      if (r.status != wire::RecvStatus::kOk) {
        drops_.refused(id, r.why);
        continue;
      }
      // A message that makes its handler throw (a field past what validation
      // checks, a state the handler did not expect) is dropped with the reason:
      // one bad message must not end the job's coordinator.
      std::string why;
      try {
        why = handle(id, *r.message);
      } catch (const std::exception& e) {
        why = fmt::format("handling it failed: {}", e.what());
      } catch (const kj::Exception& e) {
        why = fmt::format("handling it failed: {}", e.getDescription().cStr());
      }
      if (!why.empty()) drops_.refused(id, why);
    }
  }

  // Returns why the message was dropped, or "" when it was handled.
  std::string handle(const std::string& id, const wire::Message& m) {
    const auto env = m.envelope();
    const auto sender = env.getSender();
    const auto body = env.getBody();
    const int64_t now = control::steady_ms();
    const wire::Role role = sender.getRole();
    if (env.getJobId() != config_.job.name.c_str()) {  // answered, so the peer need not guess
      const std::string why = fmt::format("this coordinator runs job \"{}\", not \"{}\"",
                                          config_.job.name, env.getJobId().cStr());
      messages_.refuse(id, why);
      return why;
    }
    const std::string& launch = wire::process_launch();
    if (env.getLaunch().size() > 0 && env.getLaunch() != launch.c_str()) {
      const std::string why =
          fmt::format("{} of launch \"{}\", but this coordinator of job \"{}\" is launch \"{}\"",
                      control::role_name(role), env.getLaunch().cStr(), config_.job.name, launch);
      messages_.refuse(id, why);
      return why;
    }
    if (role == wire::Role::CLIENT) {
      if (m.kind() != Body::STATUS_REQUEST) return "clients may only ask for status";
      messages_.send(id, [&](wire::Envelope::Builder e) {
        write_status(job_.status(now), e.getBody().initStatusReply());
      });
      return "";
    }
    if (role == wire::Role::AGENT) {
      const std::string node = sender.getNode();
      if (id != control::agent_identity(node))
        return fmt::format("identity {} is not agent {}", id, node);
      auto it = job_.nodes.find(node);
      if (it == job_.nodes.end()) {
        std::string known;
        for (const auto& [name, n] : job_.nodes) known += (known.empty() ? "" : ", ") + name;
        const std::string why =
            fmt::format("node \"{}\" is not in cluster.nodes of job \"{}\" ({})", node,
                        config_.job.name, known);
        messages_.refuse(id, why);
        return why;
      }
      return handle_agent(it->second, m, now);
    }
    const ActorKey key{role, sender.getRank()};
    auto it = job_.actors.find(key);
    if (it == job_.actors.end())
      return fmt::format("no actor {} {} in this job", control::role_name(role), key.second);
    if (id != control::actor_identity(role, key.second))
      return fmt::format("identity {} is not that actor's", id);
    ActorRecord& a = it->second;
    if (a.assignment.node != sender.getNode().cStr()) return "actor on an unexpected node";
    if (a.pid != 0 && a.pid != sender.getPid())
      return fmt::format("stale actor pid {}", sender.getPid());
    if (!alive(a.phase)) {
      // An actor's last messages (final heartbeat, checkpoint, metrics) may arrive after its
      // agent reported the exit: two sockets, no order between them. Keep what they report;
      // nothing else from an actor that is gone.
      if (m.kind() == Body::HEARTBEAT) {
        a.step = std::max<int64_t>(a.step, body.getHeartbeat().getStep());
        job_.mark(a);
        return "";
      }
      if (m.kind() != Body::CHECKPOINT_MANIFEST && m.kind() != Body::CHECKPOINT_CHUNK &&
          m.kind() != Body::CHECKPOINT_COMMITTED && m.kind() != Body::METRICS)
        return fmt::format("message from an actor that is {}", phase_name(a.phase));
    }
    switch (m.kind()) {
      case Body::HEARTBEAT:
        supervisor_.on_heartbeat(a, sender.getPid(), body.getHeartbeat(), env.getGeneration(), now);
        return "";
      case Body::ACTOR_EVENT:
        if (body.getActorEvent().getState() == wire::ActorState::DRAINING) {
          a.announced_drain = true;
          a.phase = Phase::kDraining;
          job_.mark(a);
          stages_.begin_drain(fmt::format("{} {} drains: {}", control::role_name(role), key.second,
                                          body.getActorEvent().getReason().cStr()),
                              now);
        }
        return "";
      case Body::METRICS: {
        if (env.getGeneration() != job_.generation)
          return fmt::format("stale generation {} (current {})", env.getGeneration(),
                             job_.generation);
        if (role != wire::Role::LEARNER) return "only learners report the job";
        if (key.second != 0) return "";  // the job's figures are learner 0's
        const auto metrics = body.getMetrics();
        const auto names = metrics.getNames();
        const auto values = metrics.getValues();
        std::vector<std::pair<std::string, double>> line;
        for (unsigned i = 0; i < std::min(names.size(), values.size()); ++i) {
          job_.metrics[names[i]] = values[i];
          line.emplace_back(names[i], values[i]);
        }
        job_.mark_metrics();
        line.emplace_back("generation", static_cast<double>(job_.generation));
        metrics_log_.append(job_.stage(), metrics.getStep(), line);
        return "";
      }
      case Body::CHECKPOINT_MANIFEST:
      case Body::CHECKPOINT_CHUNK:
      case Body::CHECKPOINT_COMMITTED:
        return checkpoints_.on_upload(id, key, env);
      case Body::STORE_REQUEST: {
        if (role != wire::Role::LEARNER) return "only learners use the rendezvous store";
        const auto request = body.getStoreRequest();
        // Keys of a generation that began meanwhile: its waiters are answered before this.
        messages_.store_replies(rendezvous_.begin_generation(job_.generation));
        control::StoreQuery query;
        try {
          query = control::read_store_request(request);
        } catch (const std::invalid_argument& e) {
          control::StoreAnswer refused;
          refused.id = request.getId();
          refused.error = e.what();
          messages_.store_replies({{id, refused}});
          return fmt::format("store request refused: {}", e.what());
        }
        messages_.store_replies(
            rendezvous_.apply(id, request.getId(), request.getGeneration(), query, now));
        return "";
      }
      case Body::CHECKPOINT_REQUEST:
        if (role == wire::Role::DATA) return "data actors load no checkpoints";
        checkpoints_.send(id, control::read_query(body.getCheckpointRequest()));
        return "";
      default:
        return fmt::format("unexpected {} from an actor", wire::kind_name(m.kind()));
    }
  }

  std::string handle_agent(NodeRecord& node, const wire::Message& m, int64_t now) {
    const auto body = m.envelope().getBody();
    switch (m.kind()) {
      case Body::REGISTER_NODE:
        supervisor_.on_register(node, body.getRegisterNode(), now);
        return "";
      case Body::HEARTBEAT:
        supervisor_.on_agent_heartbeat(node, now);
        return "";
      case Body::ACTOR_EVENT:
        return supervisor_.on_agent_event(node, body.getActorEvent(), now);
      default:
        return fmt::format("unexpected {} from an agent", wire::kind_name(m.kind()));
    }
  }

  // --- decisions (the supervisor's and the stage runner's) ------------------

  void tick(int64_t now) {
    const StageProgress progress = stages_.progress();  // before the supervisor starts anyone
    supervisor_.tick(now);
    stages_.tick(now, progress);
  }

  void on_signal(int signal) {
    if (signal == 0) return;
    stages_.skip_linger();  // asked to stop: no status served after the job ends
    if (job_.ended()) {
      spdlog::info("{}: the job has ended; serving status no longer", strsignal(signal));
      return;
    }
    if (++signals_seen_ == 1) {
      stages_.begin_drain(fmt::format("coordinator received {}", strsignal(signal)),
                          control::steady_ms());
    } else {
      spdlog::warn("second {}: ending now", strsignal(signal));
      stages_.end_now(control::steady_ms());
    }
  }

  // --- sending ---------------------------------------------------------------

  // Sends one message to peer `id` unless its queue is full (kFull: nothing was
  // built or sent) or it is not connected (kGone).
  Sent try_send_to(const std::string& id, const Fill& fill) override {
    try {
      // With ROUTER_MANDATORY the routing frame is where a full queue says EAGAIN.
      if (!router_.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return Sent::kFull;
      zmq::message_t msg = writer_.make(job_.generation, fill);
      router_.send(msg, zmq::send_flags::dontwait);
      return Sent::kOk;
    } catch (const zmq::error_t& e) {
      spdlog::debug("send to {} failed: {}", id, e.what());
      return Sent::kGone;
    }
  }

  const JobConfig& config_;
  control::SignalFd signals_;
  control::Security security_;
  StateStore store_;
  JobState job_;
  MetricsLog metrics_log_;  // learner 0's figures, one JSON line per step (logging.metrics_file)
  zmq::context_t context_;
  std::optional<control::ZapHandler> zap_;
  zmq::socket_t router_;
  std::optional<MetricsHttp> metrics_;  // the Prometheus endpoint (cluster.metrics_port)
  control::EnvelopeWriter writer_;
  wire::Expect expect_;
  control::DropLog drops_;
  StageInputs stage_inputs_;             // what the stage reads from the stages before it
  CheckpointService checkpoints_;        // uploads from learner 0; downloads to actors
  control::RendezvousStore rendezvous_;  // the learners' c10d keys, of the current generation only
  PeerMessages messages_;                // what the coordinator tells agents and actors
  StageRunner stages_;                   // stage transitions, drain, the end of the job
  Supervisor supervisor_;                // starts, heartbeats, restarts and their cap, generations
  int signals_seen_ = 0;
};

}  // namespace

int run_coordinator(const JobConfig& config, const CoordinatorOptions& options) {
  if (options.fresh) {
    // The job's state, every stage's checkpoints and the policy stage's rollouts.
    const std::filesystem::path db = coordinator_db_path(config);
    std::vector<std::filesystem::path> stores = {db, db.parent_path() / "rollouts.db"};
    for (const std::string& stage : config.job.stages)
      if (stage != "pretrain") stores.push_back(StateStore::stage_store_path(db, stage));
    if (std::find(config.job.stages.begin(), config.job.stages.end(), "probe") !=
        config.job.stages.end())
      stores.push_back(db.parent_path() / kSupervisedBaselineDir);
    for (const std::filesystem::path& path : stores) {
      std::error_code ec;
      if (std::filesystem::remove_all(path, ec) > 0)
        spdlog::warn("--fresh: deleted {}", path.string());
      if (ec)
        throw std::runtime_error(
            fmt::format("--fresh: cannot delete {}: {}", path.string(), ec.message()));
    }
  }
  Coordinator coordinator(config, options);
  return coordinator.run();
}

}  // namespace saccade::coordinator
