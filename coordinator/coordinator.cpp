#include "coordinator/coordinator.h"

#include <fmt/format.h>
#include <kj/exception.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <map>
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

namespace saccade::control {

std::filesystem::path coordinator_db_path(const JobConfig& config) {
  return std::filesystem::path(config.job.work_dir) / "coordinator.db";
}

namespace {

using Body = wire::Envelope::Body;

// No wait on the rendezvous store outlasts the longest timeout the learners are given.
RendezvousLimits rendezvous_limits(const JobConfig& config) {
  RendezvousLimits limits;
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
        security_(load_security(config.security, true)),
        store_(coordinator_db_path(config)),
        job_(config, store_, steady_ms()),
        metrics_log_(
            (std::filesystem::path(config.job.work_dir) / config.logging.metrics_file).string()),
        router_(context_, zmq::socket_type::router),
        writer_({config.job.name, wire::Role::COORDINATOR, 0, ""}),
        expect_(expect_any_job(config)),
        stage_inputs_(config, store_.checkpoints("pretrain"), coordinator_db_path(config)),
        checkpoints_(config, job_, store_, stage_inputs_, *this),
        rendezvous_(rendezvous_limits(config)),
        timeout_ms_(config.cluster.heartbeat_interval_ms * config.cluster.heartbeat_misses) {
    job_.load(steady_ms());
    begin_stage();
    if (security_.curve) zap_.emplace(context_, security_.client.public_key);
    configure_server(router_, security_);
    router_.set(zmq::sockopt::maxmsgsize, config.cluster.max_message_bytes);
    // A peer's full send queue answers EAGAIN instead of silently dropping the message:
    // checkpoint downloads wait for room (CheckpointService::pump), the rest is dropped.
    router_.set(zmq::sockopt::router_mandatory, 1);
    const std::string bind =
        fmt::format("tcp://{}:{}", bind_host(config, options), config.cluster.coordinator_port);
    bind_router(router_, bind);
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
      ended_ms_ = steady_ms() - config_.cluster.status_linger_ms;
    }
    int64_t next_tick = 0;
    while (!done_) {
      std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                            {nullptr, signals_.fd(), ZMQ_POLLIN, 0}};
      if (zap_) items.push_back({zap_->socket().handle(), 0, ZMQ_POLLIN, 0});
      if (metrics_) items.push_back({metrics_->socket().handle(), 0, ZMQ_POLLIN, 0});
      // While a download waits for room in a learner's queue, come back within 1 ms.
      const int64_t wait =
          std::clamp<int64_t>(next_tick - steady_ms(), 0, checkpoints_.busy() ? 1 : 50);
      poll_interruptible(items.data(), items.size(), std::chrono::milliseconds(wait));
      if (items[0].revents & ZMQ_POLLIN) receive_all();
      if (items[1].revents & ZMQ_POLLIN) on_signal(signals_.take());
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) zap_->handle_one();
      if (metrics_ && (items.back().revents & ZMQ_POLLIN))
        metrics_->serve([this] { return status_prometheus(job_.status(steady_ms())); });
      checkpoints_.pump(steady_ms());
      checkpoints_.finish_commit();
      deliver(rendezvous_.begin_generation(job_.generation));
      deliver(rendezvous_.expire(steady_ms()));
      if (steady_ms() >= next_tick) {
        tick(steady_ms());
        next_tick = steady_ms() + config_.cluster.heartbeat_interval_ms;
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
      wire::Received r = wire::open_frame(frame, expect_);
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
    const int64_t now = steady_ms();
    const wire::Role role = sender.getRole();
    if (env.getJobId() != config_.job.name.c_str()) {  // answered, so the peer need not guess
      const std::string why = fmt::format("this coordinator runs job \"{}\", not \"{}\"",
                                          config_.job.name, env.getJobId().cStr());
      refuse(id, why);
      return why;
    }
    const std::string& launch = wire::process_launch();
    if (env.getLaunch().size() > 0 && env.getLaunch() != launch.c_str()) {
      const std::string why =
          fmt::format("{} of launch \"{}\", but this coordinator of job \"{}\" is launch \"{}\"",
                      role_name(role), env.getLaunch().cStr(), config_.job.name, launch);
      refuse(id, why);
      return why;
    }
    if (role == wire::Role::CLIENT) {
      if (m.kind() != Body::STATUS_REQUEST) return "clients may only ask for status";
      reply(id, [&](wire::Envelope::Builder e) {
        write_status(job_.status(now), e.getBody().initStatusReply());
      });
      return "";
    }
    if (role == wire::Role::AGENT) {
      const std::string node = sender.getNode();
      if (id != agent_identity(node)) return fmt::format("identity {} is not agent {}", id, node);
      auto it = job_.nodes.find(node);
      if (it == job_.nodes.end()) {
        std::string known;
        for (const auto& [name, n] : job_.nodes) known += (known.empty() ? "" : ", ") + name;
        const std::string why =
            fmt::format("node \"{}\" is not in cluster.nodes of job \"{}\" ({})", node,
                        config_.job.name, known);
        refuse(id, why);
        return why;
      }
      return handle_agent(it->second, m, now);
    }
    const ActorKey key{role, sender.getRank()};
    auto it = job_.actors.find(key);
    if (it == job_.actors.end())
      return fmt::format("no actor {} {} in this job", role_name(role), key.second);
    if (id != actor_identity(role, key.second))
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
      case Body::HEARTBEAT: {
        const auto hb = body.getHeartbeat();
        a.pid = sender.getPid();
        a.last_heartbeat_ms = now;
        a.step = hb.getStep();
        a.items_per_second = hb.getItemsPerSecond();
        if (hb.getState() == wire::ActorState::DRAINING)
          a.phase = Phase::kDraining;
        else if (a.phase == Phase::kStarting)
          a.phase = Phase::kRunning;
        job_.mark(a);
        if (role == wire::Role::LEARNER && env.getGeneration() != job_.generation &&
            job_.state == JobPhase::kRunning)
          send_rendezvous(a);
        return "";
      }
      case Body::ACTOR_EVENT:
        if (body.getActorEvent().getState() == wire::ActorState::DRAINING) {
          a.announced_drain = true;
          a.phase = Phase::kDraining;
          job_.mark(a);
          begin_drain(fmt::format("{} {} drains: {}", role_name(role), key.second,
                                  body.getActorEvent().getReason().cStr()));
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
        deliver(rendezvous_.begin_generation(job_.generation));
        StoreQuery query;
        try {
          query = read_store_request(request);
        } catch (const std::invalid_argument& e) {
          StoreAnswer refused;
          refused.id = request.getId();
          refused.error = e.what();
          deliver({{id, refused}});
          return fmt::format("store request refused: {}", e.what());
        }
        deliver(rendezvous_.apply(id, request.getId(), request.getGeneration(), query, now));
        return "";
      }
      case Body::CHECKPOINT_REQUEST:
        if (role == wire::Role::DATA) return "data actors load no checkpoints";
        checkpoints_.send(id, read_query(body.getCheckpointRequest()));
        return "";
      default:
        return fmt::format("unexpected {} from an actor", wire::kind_name(m.kind()));
    }
  }

  std::string handle_agent(NodeRecord& node, const wire::Message& m, int64_t now) {
    const auto body = m.envelope().getBody();
    switch (m.kind()) {
      case Body::REGISTER_NODE:
        on_register(node, body.getRegisterNode(), now);
        return "";
      case Body::HEARTBEAT:
        node.last_heartbeat_ms = now;
        if (node.state != NodeRecord::State::kRegistered) {
          // It thinks it is registered with a coordinator that does not know it: ask again.
          send_to(agent_identity(node.spec.name), [](wire::Envelope::Builder e) {
            auto ack = e.getBody().initAck();
            ack.setOk(false);
            ack.setError("not registered");
          });
        }
        return "";
      case Body::ACTOR_EVENT: {
        const auto ev = body.getActorEvent();
        if (ev.getRole() == wire::Role::AGENT) {
          if (ev.getState() == wire::ActorState::DRAINING)
            begin_drain(fmt::format("agent {}: {}", node.spec.name, ev.getReason().cStr()));
          if (ev.getState() == wire::ActorState::EXITED ||
              ev.getState() == wire::ActorState::FAILED) {
            node.state = NodeRecord::State::kExited;
            node.since_ms = now;
          }
          return "";
        }
        auto it = job_.actors.find({ev.getRole(), ev.getRank()});
        if (it == job_.actors.end() || it->second.assignment.node != node.spec.name)
          return "event about an actor not placed on that node";
        ActorRecord& a = it->second;
        if (ev.getState() == wire::ActorState::STARTING) {
          if (a.phase == Phase::kStarting) a.pid = ev.getPid();
          job_.mark(a);
          return "";
        }
        if (a.pid != 0 && ev.getPid() != a.pid) return "event about a stale pid";
        if (!alive(a.phase)) return "";
        on_exit(a, ev.getExitCode(), ev.getSignal(), ev.getReason(), now);
        return "";
      }
      default:
        return fmt::format("unexpected {} from an agent", wire::kind_name(m.kind()));
    }
  }

  // --- decisions -------------------------------------------------------------

  void on_register(NodeRecord& node, wire::RegisterNode::Reader r, int64_t now) {
    const bool again = node.state == NodeRecord::State::kRegistered;
    node.state = NodeRecord::State::kRegistered;
    node.since_ms = node.last_heartbeat_ms = now;
    node.cores = r.getCores();
    node.gpus = r.getGpus();
    node.memory_bytes = r.getMemoryBytes();
    spdlog::info("node {} registered{} ({} cores, {} GPUs, {} MiB, {} actors running)",
                 node.spec.name, again ? " again" : "", node.cores, node.gpus,
                 node.memory_bytes >> 20, r.getActors().size());
    const std::string id = agent_identity(node.spec.name);
    if (job_.ended()) {
      send_shutdown(id, false);
      return;
    }
    send_to(id, [&](wire::Envelope::Builder e) {
      auto assign = e.getBody().initAssignRoles();
      assign.setNodeName(node.spec.name);
      assign.setConfigToml(to_toml(config_));
      std::vector<const ActorRecord*> mine;
      for (const auto& [k, a] : job_.actors)
        if (a.assignment.node == node.spec.name) mine.push_back(&a);
      auto list = assign.initActors(static_cast<unsigned>(mine.size()));
      for (size_t i = 0; i < mine.size(); ++i)
        write_assignment(mine[i]->assignment, list[static_cast<unsigned>(i)]);
    });
    std::map<ActorKey, uint32_t> running;
    std::map<ActorKey, wire::ActorEvent::Reader> ended;  // how the others ended, if known
    for (auto ev : r.getActors()) {
      if (ev.getState() == wire::ActorState::STARTING ||
          ev.getState() == wire::ActorState::RUNNING || ev.getState() == wire::ActorState::DRAINING)
        running[{ev.getRole(), ev.getRank()}] = ev.getPid();
      else
        ended.insert_or_assign({ev.getRole(), ev.getRank()}, ev);
    }
    for (auto& [k, a] : job_.actors) {
      if (a.assignment.node != node.spec.name) continue;
      auto found = running.find(k);
      if (found != running.end()) {
        if (alive(a.phase) || a.phase == Phase::kPending) {  // adopt it
          a.pid = found->second;
          if (a.phase == Phase::kPending) a.phase = Phase::kStarting;
          a.last_heartbeat_ms = now;
          job_.mark(a);
        }
      } else if (a.phase == Phase::kPending && job_.state == JobPhase::kRunning) {
        start_actor(a, now);
      } else if (auto e = ended.find(k); alive(a.phase) && e != ended.end() &&
                                         (a.pid == 0 || a.pid == e->second.getPid())) {
        on_exit(a, e->second.getExitCode(), e->second.getSignal(), e->second.getReason(), now);
      } else if (alive(a.phase)) {
        on_exit(a, -1, 0, "not running on its node after the agent registered again", now);
      }
    }
  }

  void on_exit(ActorRecord& a, int exit_code, int signal, const std::string& reason, int64_t now) {
    const std::string who = fmt::format("{} {} on {}", role_name(a.assignment.role),
                                        a.assignment.rank, a.assignment.node);
    a.pid = 0;
    job_.mark(a);
    checkpoints_.forget(actor_identity(a.assignment.role, a.assignment.rank));
    if (exit_code == 0 && signal == 0) {
      a.phase = Phase::kExited;
      spdlog::info("{} exited cleanly{}", who, a.announced_drain ? " (drained)" : "");
      return;
    }
    std::string what = signal ? fmt::format("killed by signal {}", signal)
                              : fmt::format("exit code {}", exit_code);
    if (!reason.empty()) what += ": " + reason;
    if (!a.last_reason.empty()) what += " (" + a.last_reason + ")";
    a.last_reason.clear();
    if (job_.state != JobPhase::kRunning || stage_ending_ms_ >= 0) {
      a.phase = Phase::kFailed;
      spdlog::warn("{} ended while the {} is {}: {}", who,
                   job_.state != JobPhase::kRunning ? "job" : "stage",
                   job_.state != JobPhase::kRunning ? job_phase_name(job_.state) : "ending", what);
      return;
    }
    if (exit_code == control::kExitInputRefused) {
      a.phase = Phase::kFailed;
      end_job(JobPhase::kFailed,
              fmt::format("{} cannot run stage {} with its inputs ({}; its log says why): not "
                          "restarted, the same inputs would fail again",
                          who, a.assignment.stage, what));
      return;
    }
    if (a.assignment.role == wire::Role::LEARNER) {
      job_.begin_generation();
      spdlog::warn("learner lost ({}): generation {}, every learner re-rendezvous", who,
                   job_.generation);
      for (auto& [k, other] : job_.actors)
        if (k.first == wire::Role::LEARNER && alive(other.phase) && &other != &a)
          send_rendezvous(other);
    }
    const uint32_t n = ++job_.role_restarts[a.assignment.role];
    job_.mark_job();
    if (n > static_cast<uint32_t>(config_.cluster.max_restarts)) {
      a.phase = Phase::kFailed;
      end_job(
          JobPhase::kFailed,
          fmt::format("restart cap reached: {} actors failed {} times (cluster.max_restarts = "
                      "{}); last: {}: {}",
                      role_name(a.assignment.role), n, config_.cluster.max_restarts, who, what));
      return;
    }
    const int64_t base = config_.cluster.restart_backoff_ms;
    const int64_t delay = std::min<int64_t>(base << std::min<uint32_t>(n - 1, 30),
                                            config_.cluster.restart_backoff_max_ms);
    a.phase = Phase::kRestarting;
    ++a.restarts;
    a.restart_at_ms = now + delay;
    spdlog::warn("{} failed ({}); restart {} of the role in {} ms", who, what, n, delay);
  }

  void start_actor(ActorRecord& a, int64_t now) {
    if (job_.nodes.at(a.assignment.node).state != NodeRecord::State::kRegistered) return;
    a.phase = Phase::kStarting;
    a.pid = 0;
    a.started_ms = a.last_heartbeat_ms = now;
    a.kill_sent_ms = -1;
    a.announced_drain = false;
    job_.mark(a);
    send_to(agent_identity(a.assignment.node), [&](wire::Envelope::Builder e) {
      auto cmd = e.getBody().initActorCommand();
      cmd.setAction(wire::ActorCommand::Action::START);
      write_assignment(a.assignment, cmd.initAssignment());
      cmd.setRestarts(a.restarts);
    });
  }

  // The learners meet through this coordinator's rendezvous store (StoreRequest), so the
  // rendezvous names no store address.
  void send_rendezvous(const ActorRecord& learner) {
    int32_t world = 0;
    for (const auto& [k, a] : job_.actors)
      if (k.first == wire::Role::LEARNER) ++world;
    send_to(actor_identity(wire::Role::LEARNER, learner.assignment.rank),
            [&](wire::Envelope::Builder e) {
              auto r = e.getBody().initRendezvous();
              r.setWorldSize(world);
              r.setRank(learner.assignment.rank);
              r.setResumeFromStep(job_.generation_resume_step);
              r.setCollectiveTimeoutMs(config_.cluster.collective_timeout_s * 1000);
            });
  }

  void begin_drain(const std::string& why) {
    if (job_.state != JobPhase::kRunning) return;
    spdlog::warn("job drains: {}", why);
    job_.state = JobPhase::kDraining;
    job_.reason = why;
    job_.mark_job();
    job_.flush(true);
    drain_deadline_ms_ = steady_ms() + config_.cluster.drain_timeout_s * 1000;
    for (auto& [k, a] : job_.actors) {
      if (alive(a.phase)) {
        a.phase = Phase::kDraining;
        send_shutdown(actor_identity(k.first, k.second), true);
      } else if (a.phase == Phase::kRestarting || a.phase == Phase::kPending) {
        a.phase = Phase::kExited;
      }
      job_.mark(a);
    }
  }

  void end_job(JobPhase state, const std::string& why) {
    if (job_.ended()) return;
    job_.state = state;
    if (!why.empty()) job_.reason = why;
    job_.mark_job();
    job_.flush(true);
    ended_ms_ = steady_ms();
    spdlog::log(state == JobPhase::kFailed ? spdlog::level::err : spdlog::level::info, "job {}{}",
                job_phase_name(state), job_.reason.empty() ? "" : ": " + job_.reason);
    for (auto& [k, a] : job_.actors)
      if (alive(a.phase)) send_shutdown(actor_identity(k.first, k.second), false);
  }

  void tick(int64_t now) {
    const int64_t timeout = timeout_ms_;
    for (auto& [name, n] : job_.nodes) {
      if (n.state == NodeRecord::State::kRegistered) {
        send_to(agent_identity(name), [](wire::Envelope::Builder e) {
          e.getBody().initHeartbeat().setState(wire::ActorState::RUNNING);
        });
        if (now - n.last_heartbeat_ms > timeout) {
          spdlog::warn("node {} lost: no heartbeat for {} ms", name, now - n.last_heartbeat_ms);
          n.state = NodeRecord::State::kLost;
          n.since_ms = now;
        }
      }
      const bool absent =
          n.state == NodeRecord::State::kLost || n.state == NodeRecord::State::kWaiting;
      if (absent && job_.state == JobPhase::kRunning &&
          now - n.since_ms > config_.cluster.reconnect_grace_s * 1000) {
        end_job(JobPhase::kFailed,
                fmt::format("node {} {} for {} s (cluster.reconnect_grace_s)", name,
                            n.state == NodeRecord::State::kLost ? "lost" : "never registered",
                            config_.cluster.reconnect_grace_s));
      }
    }
    bool all_done = true, any_completes = false, any_alive = false;
    for (auto& [k, a] : job_.actors) {
      const bool node_up = job_.nodes.at(a.assignment.node).state == NodeRecord::State::kRegistered;
      if (alive(a.phase)) {
        any_alive = true;
        send_to(actor_identity(k.first, k.second), [](wire::Envelope::Builder e) {
          e.getBody().initHeartbeat().setState(wire::ActorState::RUNNING);
        });
        // A starting actor gets 10 s more to load before it must heartbeat.
        const int64_t limit = a.phase == Phase::kStarting ? timeout + 10000 : timeout;
        const int64_t silent = now - a.last_heartbeat_ms;
        if (silent > limit && node_up && (a.kill_sent_ms < 0 || now - a.kill_sent_ms > timeout)) {
          a.last_reason = fmt::format("hung: no heartbeat for {} ms", silent);
          a.kill_sent_ms = now;
          spdlog::warn("{} {} {}: killing it", role_name(k.first), k.second, a.last_reason);
          kill_actor(a, a.last_reason);
        }
      }
      if (job_.state == JobPhase::kRunning && stage_ending_ms_ < 0 && node_up &&
          (a.phase == Phase::kPending || (a.phase == Phase::kRestarting && now >= a.restart_at_ms)))
        start_actor(a, now);
      if (completes_stage(job_.stage(), k.first)) {
        any_completes = true;
        all_done = all_done && a.phase == Phase::kExited;
      }
    }
    if (job_.state == JobPhase::kRunning && any_completes && all_done) end_stage(now, any_alive);
    if (job_.state == JobPhase::kDraining && (!any_alive || now > drain_deadline_ms_))
      end_job(JobPhase::kDrained, "");
    if (job_.ended()) finish_when_quiet(now);
  }

  // The stage's learners are done: the actors that served them are shut down
  // (killed after cluster.drain_timeout_s), then the next stage begins, or the
  // job finishes after the last one.
  void end_stage(int64_t now, bool any_alive) {
    if (stage_ending_ms_ < 0) {
      stage_ending_ms_ = now;
      for (auto& [k, a] : job_.actors) {
        if (a.phase == Phase::kPending || a.phase == Phase::kRestarting) a.phase = Phase::kExited;
        if (alive(a.phase)) {
          a.phase = Phase::kDraining;
          send_shutdown(actor_identity(k.first, k.second), false);
        }
        job_.mark(a);
      }
      if (any_alive)
        spdlog::info("stage {} done: stopping the actors that served it", job_.stage());
    }
    if (any_alive) {
      if (now < stage_ending_ms_ + config_.cluster.drain_timeout_s * 1000) return;
      for (auto& [k, a] : job_.actors) {
        if (!alive(a.phase)) continue;
        spdlog::warn("{} {} did not stop within cluster.drain_timeout_s: killing it",
                     role_name(k.first), k.second);
        kill_actor(a, "the stage ended and it did not stop");
        a.phase = Phase::kExited;
        job_.mark(a);
      }
    }
    stage_ending_ms_ = -1;
    const std::string done = job_.stage();
    const double seconds =
        1e-9 * static_cast<double>(wire::now_ns() - job_.stages[done].started_ns);
    bool advanced = false;
    try {
      advanced = job_.advance_stage(now);
    } catch (const std::exception& e) {  // e.g. the next stage's store cannot open
      end_job(JobPhase::kFailed,
              fmt::format("stage {} finished, the next cannot begin: {}", done, e.what()));
      return;
    }
    if (!advanced) {
      spdlog::info("stage {} finished in {:.1f} s, the last of the job", done, seconds);
      end_job(JobPhase::kFinished, "");
      return;
    }
    spdlog::info("stage {} finished in {:.1f} s; stage {}/{} {} begins with {} actors", done,
                 seconds, job_.stage_index + 1, config_.job.stages.size(), job_.stage(),
                 job_.actors.size());
    begin_stage();
  }

  // What the running stage may read of the stages before it.
  void begin_stage() {
    std::vector<std::pair<std::string, const storage::CheckpointStore*>> outputs;
    for (size_t i = 0; i < job_.stage_index; ++i) {
      const std::string& name = config_.job.stages[i];
      if (name != "pretrain") outputs.emplace_back(name, &store_.checkpoints(name));
    }
    stage_inputs_.set_stage_outputs(std::move(outputs));
  }

  void kill_actor(const ActorRecord& a, const std::string& reason) {
    send_to(agent_identity(a.assignment.node), [&](wire::Envelope::Builder e) {
      auto cmd = e.getBody().initActorCommand();
      cmd.setAction(wire::ActorCommand::Action::KILL);
      write_assignment(a.assignment, cmd.initAssignment());
      cmd.setReason(reason);
    });
  }

  void finish_when_quiet(int64_t now) {
    if (ended_ms_ < 0) ended_ms_ = now;
    bool agents_gone = true;
    for (auto& [name, n] : job_.nodes) {
      if (n.state == NodeRecord::State::kRegistered) {
        agents_gone = false;
        send_shutdown(agent_identity(name), false);
      }
    }
    const int64_t linger = config_.cluster.status_linger_ms;
    const int64_t hard = ended_ms_ + config_.cluster.drain_timeout_s * 1000 + linger;
    if ((agents_gone && now >= ended_ms_ + linger) || now >= hard) done_ = true;
  }

  void on_signal(int signal) {
    if (signal == 0) return;
    if (++signals_seen_ == 1) {
      begin_drain(fmt::format("coordinator received {}", strsignal(signal)));
    } else {
      spdlog::warn("second {}: ending now", strsignal(signal));
      end_job(JobPhase::kDrained, "");
      done_ = true;
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
  // Fire and forget: a message to a full or unknown peer is dropped.
  void send_to(const std::string& id, const std::function<void(wire::Envelope::Builder)>& fill) {
    try_send_to(id, fill);
  }
  void reply(const std::string& id, const std::function<void(wire::Envelope::Builder)>& fill) {
    send_to(id, fill);
  }
  // Answers of the rendezvous store; one to a learner that is gone is dropped (it re-asks).
  void deliver(const std::vector<RendezvousStore::Delivery>& answers) {
    for (const auto& d : answers)
      send_to(d.to, [&](wire::Envelope::Builder e) {
        write_store_reply(d.answer, e.getBody().initStoreReply());
      });
  }
  // A final answer to a peer this coordinator will not serve.
  void refuse(const std::string& id, const std::string& why) {
    send_to(id, [&](wire::Envelope::Builder e) {
      auto r = e.getBody().initRefusal();
      r.setReason(why);
      r.setJobId(config_.job.name);
    });
  }
  void send_shutdown(const std::string& id, bool checkpoint) {
    send_to(id, [&](wire::Envelope::Builder e) {
      auto s = e.getBody().initShutdown();
      s.setReason(job_.reason.empty() ? job_phase_name(job_.state) : job_.reason);
      s.setCheckpointFirst(checkpoint);
    });
  }

  const JobConfig& config_;
  SignalFd signals_;
  Security security_;
  StateStore store_;
  JobState job_;
  MetricsLog metrics_log_;  // learner 0's figures, one JSON line per step (logging.metrics_file)
  zmq::context_t context_;
  std::optional<ZapHandler> zap_;
  zmq::socket_t router_;
  std::optional<MetricsHttp> metrics_;  // the Prometheus endpoint (cluster.metrics_port)
  EnvelopeWriter writer_;
  wire::Expect expect_;
  DropLog drops_;
  StageInputs stage_inputs_;       // what the stage reads from the stages before it
  CheckpointService checkpoints_;  // uploads from learner 0; downloads to actors
  RendezvousStore rendezvous_;     // the learners' c10d keys, of the current generation only
  int64_t timeout_ms_;
  int64_t drain_deadline_ms_ = 0;
  int64_t stage_ending_ms_ = -1;  // when the running stage's learners were all done; -1: not yet
  int64_t ended_ms_ = -1;
  int signals_seen_ = 0;
  bool done_ = false;
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

}  // namespace saccade::control
