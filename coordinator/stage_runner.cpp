#include "coordinator/stage_runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "control/control.h"
#include "control/placement.h"

namespace saccade::coordinator {

StageRunner::StageRunner(const JobConfig& config, JobState& job, StateStore& store,
                         StageInputs& inputs, PeerMessages& peers)
    : config_(config), job_(job), store_(store), inputs_(inputs), peers_(peers) {}

void StageRunner::begin_stage() {
  std::vector<std::pair<std::string, const storage::CheckpointStore*>> outputs;
  for (size_t i = 0; i < job_.stage_index; ++i) {
    const std::string& name = config_.job.stages[i];
    if (name != "pretrain") outputs.emplace_back(name, &store_.checkpoints(name));
  }
  inputs_.set_stage_outputs(std::move(outputs));
}

void StageRunner::begin_drain(const std::string& why, int64_t now) {
  if (job_.state != JobPhase::kRunning) return;
  spdlog::warn("job drains: {}", why);
  job_.state = JobPhase::kDraining;
  job_.reason = why;
  job_.mark_job();
  job_.flush(true);
  drain_deadline_ms_ = now + config_.cluster.drain_timeout_s * 1000;
  for (auto& [k, a] : job_.actors) {
    if (alive(a.phase)) {
      a.phase = Phase::kDraining;
      peers_.shutdown(control::actor_identity(k.first, k.second), true);
    } else if (a.phase == Phase::kRestarting || a.phase == Phase::kPending) {
      a.phase = Phase::kExited;
    }
    job_.mark(a);
  }
}

void StageRunner::end_job(JobPhase state, const std::string& why, int64_t now) {
  if (job_.ended()) return;
  job_.state = state;
  if (!why.empty()) job_.reason = why;
  job_.mark_job();
  job_.flush(true);
  ended_ms_ = now;
  spdlog::log(state == JobPhase::kFailed ? spdlog::level::err : spdlog::level::info, "job {}{}",
              job_phase_name(state), job_.reason.empty() ? "" : ": " + job_.reason);
  for (auto& [k, a] : job_.actors)
    if (alive(a.phase)) peers_.shutdown(control::actor_identity(k.first, k.second), false);
}

void StageRunner::end_now(int64_t now) {
  end_job(JobPhase::kDrained, "", now);
  done_ = true;
}

StageProgress StageRunner::progress() const {
  StageProgress p;
  bool all_done = true, any_completes = false;
  for (const auto& [k, a] : job_.actors) {
    p.any_alive = p.any_alive || alive(a.phase);
    if (control::completes_stage(job_.stage(), k.first)) {
      any_completes = true;
      all_done = all_done && a.phase == Phase::kExited;
    }
  }
  p.learners_done = any_completes && all_done;
  return p;
}

void StageRunner::tick(int64_t now, const StageProgress& progress) {
  if (job_.state == JobPhase::kRunning && progress.learners_done)
    end_stage(now, progress.any_alive);
  if (job_.state == JobPhase::kDraining && (!progress.any_alive || now > drain_deadline_ms_))
    end_job(JobPhase::kDrained, "", now);
  if (job_.ended()) finish_when_quiet(now);
}

void StageRunner::end_stage(int64_t now, bool any_alive) {
  if (stage_ending_ms_ < 0) {
    stage_ending_ms_ = now;
    for (auto& [k, a] : job_.actors) {
      if (a.phase == Phase::kPending || a.phase == Phase::kRestarting) a.phase = Phase::kExited;
      if (alive(a.phase)) {
        a.phase = Phase::kDraining;
        peers_.shutdown(control::actor_identity(k.first, k.second), false);
      }
      job_.mark(a);
    }
    if (any_alive) spdlog::info("stage {} done: stopping the actors that served it", job_.stage());
  }
  if (any_alive) {
    if (now < stage_ending_ms_ + config_.cluster.drain_timeout_s * 1000) return;
    for (auto& [k, a] : job_.actors) {
      if (!alive(a.phase)) continue;
      spdlog::warn("{} {} did not stop within cluster.drain_timeout_s: killing it",
                   control::role_name(k.first), k.second);
      peers_.kill_actor(a, "the stage ended and it did not stop");
      a.phase = Phase::kExited;
      job_.mark(a);
    }
  }
  stage_ending_ms_ = -1;
  const std::string done = job_.stage();
  const double seconds = 1e-9 * static_cast<double>(wire::now_ns() - job_.stages[done].started_ns);
  bool advanced = false;
  try {
    advanced = job_.advance_stage(now);
  } catch (const std::exception& e) {  // e.g. the next stage's store cannot open
    end_job(JobPhase::kFailed,
            fmt::format("stage {} finished, the next cannot begin: {}", done, e.what()), now);
    return;
  }
  if (!advanced) {
    spdlog::info("stage {} finished in {:.1f} s, the last of the job", done, seconds);
    end_job(JobPhase::kFinished, "", now);
    return;
  }
  spdlog::info("stage {} finished in {:.1f} s; stage {}/{} {} begins with {} actors", done, seconds,
               job_.stage_index + 1, config_.job.stages.size(), job_.stage(), job_.actors.size());
  begin_stage();
}

void StageRunner::finish_when_quiet(int64_t now) {
  if (ended_ms_ < 0) ended_ms_ = now;
  bool agents_gone = true;
  for (auto& [name, n] : job_.nodes) {
    if (n.state == NodeRecord::State::kRegistered) {
      agents_gone = false;
      peers_.shutdown(control::agent_identity(name), false);
    }
  }
  const int64_t linger = linger_ ? config_.cluster.status_linger_ms : 0;
  const int64_t hard = ended_ms_ + config_.cluster.drain_timeout_s * 1000 + linger;
  if ((agents_gone && now >= ended_ms_ + linger) || now >= hard) done_ = true;
}

}  // namespace saccade::coordinator
