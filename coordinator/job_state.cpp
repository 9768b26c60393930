#include "coordinator/job_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace saccade::coordinator {

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

// Actor records are kept per stage: the learner 0 of one stage is not the next one's.
std::string actor_key(const std::string& stage, const ActorKey& k) {
  return fmt::format("actor/{}/{}/{}", stage, control::role_name(k.first), k.second);
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
}

void JobState::place_stage(int64_t now_ms) {
  actors.clear();
  for (control::Assignment& a : control::place_actors(config_, stage())) {
    ActorRecord r;
    const ActorKey key{a.role, a.rank};
    r.assignment = std::move(a);
    const auto saved = store_.get(actor_key(stage(), key));
    if (saved) {
      std::istringstream in(*saved);
      int phase = 0;
      in >> phase >> r.pid >> r.restarts >> r.step;
      r.phase = static_cast<Phase>(std::clamp(phase, 0, static_cast<int>(Phase::kFailed)));
      // Whatever ran keeps a full timeout to show itself to the new coordinator.
      r.last_heartbeat_ms = r.started_ms = now_ms;
      if (r.phase == Phase::kRestarting) r.restart_at_ms = now_ms;
    }
    actors.emplace(key, std::move(r));
  }
}

void JobState::load_checkpoint_index() {
  // The checkpoint index is the stage's committed checkpoints themselves.
  checkpoint_step = -1;
  checkpoint_bytes = 0;
  checkpoint_time_ns = 0;
  if (const auto latest = store_.checkpoints(stage()).latest()) {
    checkpoint_step = latest->step;
    for (const auto& b : latest->blobs) checkpoint_bytes += b.size;
    const auto t = latest->meta.find("time_ns");
    checkpoint_time_ns = t == latest->meta.end() ? 0 : std::stoll(t->second);
  }
}

void JobState::load(int64_t now_ms) {
  const auto id = store_.get("job/id");
  if (!id) {  // a fresh job
    store_.put({{"job/id", config_.job.name}, {"job/config", to_toml(config_)}}, true);
    place_stage(now_ms);
    load_checkpoint_index();
    generation_resume_step = checkpoint_step;
    stages[stage()].started_ns = wire::now_ns();
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
  for (const auto& [key, value] : store_.scan("stage/")) {
    StageRecord& r = stages[key.substr(6)];
    std::istringstream(value) >> r.started_ns >> r.finished_ns >> r.last_step;
  }
  // The stage it was in: the first of job.stages not finished (a stage the
  // config no longer lists is ignored; finished stages do not run again).
  stage_index = 0;
  while (stage_index + 1 < config_.job.stages.size() &&
         stages[config_.job.stages[stage_index]].finished_ns > 0)
    ++stage_index;
  place_stage(now_ms);
  load_checkpoint_index();
  // A database from before the field was kept: the newest commit, as then.
  generation_resume_step = std::stoll(
      store_.get("job/generation_resume_step").value_or(std::to_string(checkpoint_step)));
  for (const auto& [key, value] : store_.scan("restarts/")) {
    role_restarts[control::role_from_name(key.substr(9))] =
        static_cast<uint32_t>(std::stoul(value));
  }
  const std::string metric_prefix = fmt::format("metric/{}/", stage());
  for (const auto& [key, value] : store_.scan(metric_prefix))
    metrics[key.substr(metric_prefix.size())] = std::stod(value);
  spdlog::info(
      "resumed job \"{}\" from its database: state {}, stage {}/{} {}, generation {}, checkpoint "
      "step {}",
      config_.job.name, job_phase_name(state), stage_index + 1, config_.job.stages.size(), stage(),
      generation, checkpoint_step);
  if (stages[stage()].started_ns == 0) stages[stage()].started_ns = wire::now_ns();
  // A finished job whose config now lists a stage it has not run goes on with
  // that stage (e.g. job.stages extended from pretrain to pretrain, probe, policy).
  const bool stage_left = state == JobPhase::kFinished && stages[stage()].finished_ns == 0;
  if (stage_left) reason = fmt::format("job.stages adds {}", stage());
  if (state == JobPhase::kDrained || state == JobPhase::kFailed || stage_left) relaunch(now_ms);
}

bool JobState::advance_stage(int64_t now_ms) {
  flush();  // the ending stage's actor records, under its own keys, before they are replaced
  stages[stage()].finished_ns = wire::now_ns();
  stages[stage()].last_step = checkpoint_step;
  mark_job();
  if (stage_index + 1 >= config_.job.stages.size()) return false;
  // The next stage's store opens (or throws) before the stage changes: the next
  // launch then begins at that stage.
  store_.checkpoints(config_.job.stages[stage_index + 1]);
  ++stage_index;
  stages[stage()].started_ns = wire::now_ns();
  for (auto& [role, n] : role_restarts) n = 0;
  metrics.clear();
  place_stage(now_ms);
  load_checkpoint_index();
  begin_generation();  // the new stage's learners form a group of their own
  for (auto& [k, a] : actors) mark(a);
  flush(true);
  return true;
}

void JobState::relaunch(int64_t now_ms) {
  spdlog::info(
      "job \"{}\" {} in an earlier launch{}: this launch resumes it from checkpoint {} with a "
      "fresh restart budget (start over with --fresh)",
      config_.job.name, job_phase_name(state), reason.empty() ? "" : " (" + reason + ")",
      checkpoint_step);
  state = JobPhase::kRunning;
  reason.clear();
  begin_generation();  // the learners of this launch form a new group
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

void JobState::begin_generation() {
  ++generation;
  generation_resume_step = checkpoint_step;
  mark_job();
}

void JobState::flush(bool sync) {
  std::map<std::string, std::string> batch;
  for (const ActorKey& k : dirty_actors_) {
    const ActorRecord& a = actors.at(k);
    batch[actor_key(stage(), k)] =
        fmt::format("{} {} {} {}", static_cast<int>(a.phase), a.pid, a.restarts, a.step);
  }
  if (dirty_job_) {
    batch["job/state"] = job_phase_name(state);
    batch["job/reason"] = reason;
    batch["job/generation"] = std::to_string(generation);
    batch["job/generation_resume_step"] = std::to_string(generation_resume_step);
    for (auto [role, n] : role_restarts)
      batch[fmt::format("restarts/{}", control::role_name(role))] = std::to_string(n);
    for (const auto& [name, r] : stages)
      batch["stage/" + name] = fmt::format("{} {} {}", r.started_ns, r.finished_ns, r.last_step);
  }
  if (dirty_metrics_) {
    for (const auto& [name, v] : metrics)
      batch[fmt::format("metric/{}/{}", stage(), name)] = fmt::format("{}", v);
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
  for (auto& role_actors : by_role) {
    const std::vector<ActorRecord*>& list = role_actors.second;  // (a lambda captures it)
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
  s.stage_index = static_cast<int32_t>(stage_index);
  const int64_t now_ns = wire::now_ns();
  for (const std::string& name : config_.job.stages) {
    const auto it = stages.find(name);
    const StageRecord r = it == stages.end() ? StageRecord{} : it->second;
    StageRow row;
    row.name = name;
    row.state = r.finished_ns > 0 ? "finished" : r.started_ns > 0 ? "running" : "pending";
    if (r.started_ns > 0)
      row.seconds =
          static_cast<double>((r.finished_ns > 0 ? r.finished_ns : now_ns) - r.started_ns) * 1e-9;
    row.last_step = name == stage() ? checkpoint_step : r.last_step;
    s.stages.push_back(row);
  }
  s.state = job_phase_name(state);
  s.reason = reason;
  // What the stage's learners count: SSL steps, GRPO epochs; the probe counts nothing.
  if (stage() == "pretrain") s.total_steps = config_.ssl.steps_per_epoch * config_.ssl.epochs;
  if (stage() == "policy") s.total_steps = config_.policy.epochs;
  s.loss = metrics.count("loss") ? metrics.at("loss") : NAN;
  s.lr = metrics.count("lr") ? metrics.at("lr") : NAN;
  s.knn = metrics.count("knn") ? metrics.at("knn") : NAN;
  s.target_entropy_ratio =
      metrics.count("target_entropy_ratio") ? metrics.at("target_entropy_ratio") : NAN;
  s.prototypes_used = metrics.count("prototypes_used") ? metrics.at("prototypes_used") : NAN;
  s.metrics.insert(metrics.begin(), metrics.end());
  s.last_checkpoint_step = checkpoint_step;
  s.last_checkpoint_age_ms =
      checkpoint_step < 0 ? -1 : (wire::now_ns() - checkpoint_time_ns) / 1000000;
  s.generation = generation;
  for (const auto& [k, a] : actors) {
    if (control::completes_stage(stage(), k.first)) {
      s.step = std::max(s.step, a.step);
      if (a.phase == Phase::kRunning) s.images_per_second += a.items_per_second;
    }
    s.actors.push_back({control::role_name(k.first), k.second, a.assignment.node, a.pid,
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

}  // namespace saccade::coordinator
