#include "coordinator/supervisor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "control/control.h"
#include "control/placement.h"

namespace saccade::coordinator {

Supervisor::Supervisor(const JobConfig& config, JobState& job, StageRunner& stages,
                       PeerMessages& peers, CheckpointService& checkpoints)
    : config_(config),
      job_(job),
      stages_(stages),
      peers_(peers),
      checkpoints_(checkpoints),
      timeout_ms_(config.cluster.heartbeat_interval_ms * config.cluster.heartbeat_misses) {}

void Supervisor::on_register(NodeRecord& node, wire::RegisterNode::Reader r, int64_t now) {
  const bool again = node.state == NodeRecord::State::kRegistered;
  node.state = NodeRecord::State::kRegistered;
  node.since_ms = node.last_heartbeat_ms = now;
  node.cores = r.getCores();
  node.gpus = r.getGpus();
  node.memory_bytes = r.getMemoryBytes();
  spdlog::info("node {} registered{} ({} cores, {} GPUs, {} MiB, {} actors running)",
               node.spec.name, again ? " again" : "", node.cores, node.gpus,
               node.memory_bytes >> 20, r.getActors().size());
  if (job_.ended()) {
    peers_.shutdown(control::agent_identity(node.spec.name), false);
    return;
  }
  peers_.assign_roles(node);
  std::map<ActorKey, uint32_t> running;
  std::map<ActorKey, wire::ActorEvent::Reader> ended;  // how the others ended, if known
  for (auto ev : r.getActors()) {
    if (ev.getState() == wire::ActorState::STARTING || ev.getState() == wire::ActorState::RUNNING ||
        ev.getState() == wire::ActorState::DRAINING)
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
    } else if (auto e = ended.find(k);
               alive(a.phase) && e != ended.end() && (a.pid == 0 || a.pid == e->second.getPid())) {
      on_exit(a, e->second.getExitCode(), e->second.getSignal(), e->second.getReason(), now);
    } else if (alive(a.phase)) {
      on_exit(a, -1, 0, "not running on its node after the agent registered again", now);
    }
  }
}

void Supervisor::on_agent_heartbeat(NodeRecord& node, int64_t now) {
  node.last_heartbeat_ms = now;
  // It thinks it is registered with a coordinator that does not know it: ask again.
  if (node.state != NodeRecord::State::kRegistered) peers_.not_registered(node.spec.name);
}

std::string Supervisor::on_agent_event(NodeRecord& node, wire::ActorEvent::Reader ev, int64_t now) {
  if (ev.getRole() == wire::Role::AGENT) {
    if (ev.getState() == wire::ActorState::DRAINING)
      stages_.begin_drain(fmt::format("agent {}: {}", node.spec.name, ev.getReason().cStr()), now);
    if (ev.getState() == wire::ActorState::EXITED || ev.getState() == wire::ActorState::FAILED) {
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

void Supervisor::on_heartbeat(ActorRecord& a, uint32_t pid, wire::Heartbeat::Reader hb,
                              uint64_t generation, int64_t now) {
  a.pid = pid;
  a.last_heartbeat_ms = now;
  a.step = hb.getStep();
  a.items_per_second = hb.getItemsPerSecond();
  if (hb.getState() == wire::ActorState::DRAINING)
    a.phase = Phase::kDraining;
  else if (a.phase == Phase::kStarting)
    a.phase = Phase::kRunning;
  job_.mark(a);
  if (a.assignment.role == wire::Role::LEARNER && generation != job_.generation &&
      job_.state == JobPhase::kRunning)
    peers_.rendezvous(a);
}

void Supervisor::on_exit(ActorRecord& a, int exit_code, int signal, const std::string& reason,
                         int64_t now) {
  const std::string who = fmt::format("{} {} on {}", control::role_name(a.assignment.role),
                                      a.assignment.rank, a.assignment.node);
  a.pid = 0;
  job_.mark(a);
  checkpoints_.forget(control::actor_identity(a.assignment.role, a.assignment.rank));
  if (exit_code == 0 && signal == 0) {
    a.phase = Phase::kExited;
    spdlog::info("{} exited cleanly{}", who, a.announced_drain ? " (drained)" : "");
    return;
  }
  std::string what =
      signal ? fmt::format("killed by signal {}", signal) : fmt::format("exit code {}", exit_code);
  if (!reason.empty()) what += ": " + reason;
  if (!a.last_reason.empty()) what += " (" + a.last_reason + ")";
  a.last_reason.clear();
  if (job_.state != JobPhase::kRunning || stages_.stage_ending()) {
    a.phase = Phase::kFailed;
    spdlog::warn("{} ended while the {} is {}: {}", who,
                 job_.state != JobPhase::kRunning ? "job" : "stage",
                 job_.state != JobPhase::kRunning ? job_phase_name(job_.state) : "ending", what);
    return;
  }
  if (exit_code == control::kExitInputRefused) {
    a.phase = Phase::kFailed;
    stages_.end_job(JobPhase::kFailed,
                    fmt::format("{} cannot run stage {} with its inputs ({}; its log says why): "
                                "not restarted, the same inputs would fail again",
                                who, a.assignment.stage, what),
                    now);
    return;
  }
  if (a.assignment.role == wire::Role::LEARNER) {
    job_.begin_generation();
    spdlog::warn("learner lost ({}): generation {}, every learner re-rendezvous", who,
                 job_.generation);
    for (auto& [k, other] : job_.actors)
      if (k.first == wire::Role::LEARNER && alive(other.phase) && &other != &a)
        peers_.rendezvous(other);
  }
  const uint32_t n = ++job_.role_restarts[a.assignment.role];
  job_.mark_job();
  if (n > static_cast<uint32_t>(config_.cluster.max_restarts)) {
    a.phase = Phase::kFailed;
    stages_.end_job(
        JobPhase::kFailed,
        fmt::format("restart cap reached: {} actors failed {} times (cluster.max_restarts = "
                    "{}); last: {}: {}",
                    control::role_name(a.assignment.role), n, config_.cluster.max_restarts, who,
                    what),
        now);
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

void Supervisor::tick(int64_t now) {
  const int64_t timeout = timeout_ms_;
  for (auto& [name, n] : job_.nodes) {
    if (n.state == NodeRecord::State::kRegistered) {
      peers_.heartbeat(control::agent_identity(name));
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
      stages_.end_job(JobPhase::kFailed,
                      fmt::format("node {} {} for {} s (cluster.reconnect_grace_s)", name,
                                  n.state == NodeRecord::State::kLost ? "lost" : "never registered",
                                  config_.cluster.reconnect_grace_s),
                      now);
    }
  }
  for (auto& [k, a] : job_.actors) {
    const bool node_up = job_.nodes.at(a.assignment.node).state == NodeRecord::State::kRegistered;
    if (alive(a.phase)) {
      peers_.heartbeat(control::actor_identity(k.first, k.second));
      // A starting actor gets 10 s more to load before it must heartbeat.
      const int64_t limit = a.phase == Phase::kStarting ? timeout + 10000 : timeout;
      const int64_t silent = now - a.last_heartbeat_ms;
      if (silent > limit && node_up && (a.kill_sent_ms < 0 || now - a.kill_sent_ms > timeout)) {
        a.last_reason = fmt::format("hung: no heartbeat for {} ms", silent);
        a.kill_sent_ms = now;
        spdlog::warn("{} {} {}: killing it", control::role_name(k.first), k.second, a.last_reason);
        peers_.kill_actor(a, a.last_reason);
      }
    }
    if (job_.state == JobPhase::kRunning && !stages_.stage_ending() && node_up &&
        (a.phase == Phase::kPending || (a.phase == Phase::kRestarting && now >= a.restart_at_ms)))
      start_actor(a, now);
  }
}

void Supervisor::start_actor(ActorRecord& a, int64_t now) {
  if (job_.nodes.at(a.assignment.node).state != NodeRecord::State::kRegistered) return;
  a.phase = Phase::kStarting;
  a.pid = 0;
  a.started_ms = a.last_heartbeat_ms = now;
  a.kill_sent_ms = -1;
  a.announced_drain = false;
  job_.mark(a);
  peers_.start_actor(a);
}

}  // namespace saccade::coordinator
