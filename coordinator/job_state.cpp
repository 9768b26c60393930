#include "coordinator/job_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace saccade::control {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kPending:
      return "pending";
    case Phase::kStarting:
      return "starting";
    case Phase::kRunning:
      return "running";
    case Phase::kDraining:
      return "draining";
    case Phase::kRestarting:
      return "restarting";
    case Phase::kExited:
      return "exited";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}

bool alive(Phase p) {
  return p == Phase::kStarting || p == Phase::kRunning || p == Phase::kDraining;
}

namespace {

std::string actor_key(const ActorKey& k) {
  return fmt::format("actor/{}/{}", role_name(k.first), k.second);
}

// Wire state shown for a phase (the wire has no "pending": it shows as starting).
const char* shown_state(Phase p) {
  return p == Phase::kPending ? "starting" : phase_name(p);
}

}  // namespace

const char* job_phase_name(JobPhase p) {
  switch (p) {
    case JobPhase::kDraining:
      return "draining";
    case JobPhase::kFinished:
      return "finished";
    case JobPhase::kDrained:
      return "drained";
    case JobPhase::kFailed:
      return "failed";
    default:
      return "running";
  }
}

JobPhase job_phase_from_name(const std::string& name) {
  for (JobPhase p :
       {JobPhase::kDraining, JobPhase::kFinished, JobPhase::kDrained, JobPhase::kFailed})
    if (name == job_phase_name(p)) return p;
  return JobPhase::kRunning;
}

JobState::JobState(const JobConfig& config, StateStore& store, int64_t now_ms)
    : config_(config), store_(store) {
  for (const NodeSpec& n : config.cluster.nodes) {
    NodeRecord& r = nodes[n.name];
    r.spec = n;
    r.since_ms = now_ms;
  }
  for (Assignment& a : place_actors(config)) {
    ActorRecord r;
    const ActorKey key{a.role, a.rank};
    r.assignment = std::move(a);
    actors.emplace(key, std::move(r));
  }
}

void JobState::load(int64_t now_ms) {
  const auto id = store_.get("job/id");
  if (!id) {  // a fresh job
    store_.put({{"job/id", config_.job.name}, {"job/config", to_toml(config_)}}, true);
    mark_job();
    flush(true);
    return;
  }
  if (*id != config_.job.name) {
    throw std::runtime_error(fmt::format(
        "coordinator database holds job \"{}\", but the config's job.name is \"{}\": use another "
        "job.work_dir or job.name",
        *id, config_.job.name));
  }
  if (store_.get("job/config") != to_toml(config_))
    spdlog::warn("the config differs from the one this job started with; using the new one");
  state = job_phase_from_name(store_.get("job/state").value_or("running"));
  reason = store_.get("job/reason").value_or("");
  generation = std::stoull(store_.get("job/generation").value_or("1"));
  // The checkpoint index is the committed checkpoints themselves.
  if (const auto latest = store_.checkpoints().latest()) {
    checkpoint_step = latest->step;
    checkpoint_bytes = 0;
    for (const auto& b : latest->blobs) checkpoint_bytes += b.size;
    const auto t = latest->meta.find("time_ns");
    checkpoint_time_ns = t == latest->meta.end() ? 0 : std::stoll(t->second);
  }
  for (const auto& [key, value] : store_.scan("restarts/")) {
    role_restarts[role_from_name(key.substr(9))] = static_cast<uint32_t>(std::stoul(value));
  }
  for (const auto& [key, value] : store_.scan("metric/")) metrics[key.substr(7)] = std::stod(value);
  for (auto& [k, a] : actors) {
    const auto saved = store_.get(actor_key(k));
    if (!saved) continue;
    std::istringstream in(*saved);
    int phase = 0;
    in >> phase >> a.pid >> a.restarts >> a.step;
    a.phase = static_cast<Phase>(std::clamp(phase, 0, static_cast<int>(Phase::kFailed)));
    // Whatever ran keeps a full timeout to show itself to the new coordinator.
    a.last_heartbeat_ms = now_ms;
    a.started_ms = now_ms;
    if (a.phase == Phase::kRestarting) a.restart_at_ms = now_ms;
  }
  spdlog::info("resumed job \"{}\" from its database: state {}, generation {}, checkpoint step {}",
               config_.job.name, job_phase_name(state), generation, checkpoint_step);
  if (state == JobPhase::kDrained || state == JobPhase::kFailed) relaunch(now_ms);
}

void JobState::relaunch(int64_t now_ms) {
  spdlog::info(
      "job \"{}\" {} in an earlier launch{}: this launch resumes it from checkpoint {} with a "
      "fresh restart budget (start over with --fresh)",
      config_.job.name, job_phase_name(state), reason.empty() ? "" : " (" + reason + ")",
      checkpoint_step);
  state = JobPhase::kRunning;
  reason.clear();
  ++generation;  // the learners of this launch form a new group
  for (auto& [role, n] : role_restarts) n = 0;
  for (auto& [k, a] : actors) {
    a.phase = Phase::kPending;
    a.pid = 0;
    a.restarts = 0;
    a.kill_sent_ms = -1;
    a.last_heartbeat_ms = a.started_ms = now_ms;
    mark(a);
  }
  mark_job();
  flush(true);
}

void JobState::flush(bool sync) {
  std::map<std::string, std::string> batch;
  for (const ActorKey& k : dirty_actors_) {
    const ActorRecord& a = actors.at(k);
    batch[actor_key(k)] =
        fmt::format("{} {} {} {}", static_cast<int>(a.phase), a.pid, a.restarts, a.step);
  }
  if (dirty_job_) {
    batch["job/state"] = job_phase_name(state);
    batch["job/reason"] = reason;
    batch["job/generation"] = std::to_string(generation);
    for (auto [role, n] : role_restarts)
      batch[fmt::format("restarts/{}", role_name(role))] = std::to_string(n);
  }
  if (dirty_metrics_) {
    for (const auto& [name, v] : metrics) batch["metric/" + name] = fmt::format("{}", v);
  }
  store_.put(batch, sync);
  dirty_actors_.clear();
  dirty_job_ = dirty_metrics_ = false;
}

void JobState::update_stragglers() {
  // A rank straggles when, among at least two running ranks of its role, its
  // step is below 3/4 of the role's median minus 2 steps, or its throughput
  // below half the median throughput.
  std::map<wire::Role, std::vector<ActorRecord*>> by_role;
  for (auto& [k, a] : actors) {
    a.straggler = false;
    if (a.phase == Phase::kRunning) by_role[k.first].push_back(&a);
  }
  for (auto& [role, list] : by_role) {
    if (list.size() < 2) continue;
    auto median = [&](auto field) {
      std::vector<double> v;
      for (ActorRecord* a : list) v.push_back(field(*a));
      std::sort(v.begin(), v.end());
      const size_t n = v.size();
      return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    };
    const double step = median([](const ActorRecord& a) { return static_cast<double>(a.step); });
    const double ips = median([](const ActorRecord& a) { return a.items_per_second; });
    for (ActorRecord* a : list) {
      a->straggler = static_cast<double>(a->step) < 0.75 * step - 2 ||
                     (ips > 0 && a->items_per_second < 0.5 * ips);
    }
  }
}

JobStatus JobState::status(int64_t now_ms) {
  update_stragglers();
  JobStatus s;
  s.job_id = config_.job.name;
  s.stage = stage();
  s.state = job_phase_name(state);
  s.reason = reason;
  s.total_steps = config_.ssl.steps_per_epoch * config_.ssl.epochs;
  s.loss = metrics.count("loss") ? metrics.at("loss") : NAN;
  s.lr = metrics.count("lr") ? metrics.at("lr") : NAN;
  s.knn = metrics.count("knn") ? metrics.at("knn") : NAN;
  s.target_entropy_ratio =
      metrics.count("target_entropy_ratio") ? metrics.at("target_entropy_ratio") : NAN;
  s.prototypes_used = metrics.count("prototypes_used") ? metrics.at("prototypes_used") : NAN;
  s.last_checkpoint_step = checkpoint_step;
  s.last_checkpoint_age_ms =
      checkpoint_step < 0 ? -1 : (wire::now_ns() - checkpoint_time_ns) / 1000000;
  s.generation = generation;
  for (const auto& [k, a] : actors) {
    if (completes_job(config_, k.first)) {
      s.step = std::max(s.step, a.step);
      if (a.phase == Phase::kRunning) s.images_per_second += a.items_per_second;
    }
    s.actors.push_back({role_name(k.first), k.second, a.assignment.node, a.pid,
                        shown_state(a.phase),
                        a.last_heartbeat_ms < 0 ? -1 : now_ms - a.last_heartbeat_ms, a.restarts,
                        a.step, a.items_per_second, a.straggler});
  }
  for (const auto& [name, n] : nodes) {
    static constexpr const char* kStates[] = {"waiting", "registered", "lost", "exited"};
    s.nodes.push_back({name, n.spec.host, n.cores, n.gpus, n.memory_bytes,
                       kStates[static_cast<int>(n.state)],
                       n.last_heartbeat_ms < 0 ? -1 : now_ms - n.last_heartbeat_ms});
  }
  return s;
}

}  // namespace saccade::control
