// `saccade coordinator CONFIG`: owns one job. Places actors on the nodes whose
// agents register, decides restarts (count, backoff, cap), watches heartbeats
// both ways, hands learners their rendezvous and generation, serves status
// (control socket) and Prometheus text (metrics port), and keeps all of this
// in RocksDB under job.work_dir so that a restarted coordinator resumes the job.
// Inside, coordinator.cpp is the poll loop and the dispatch of messages; the
// decisions are a Supervisor's (starts, heartbeats, restarts: supervisor.h), a
// StageRunner's (stages, drain, the end of the job: stage_runner.h) and the
// CheckpointService's, which reach peers through PeerMessages.
#pragma once

#include <filesystem>
#include <string>

#include "common/config.h"

namespace saccade::coordinator {

// Exit codes of `saccade coordinator` and `saccade run` (docs/runtime.md):
inline constexpr int kExitJobFinished = 0;  // the whole budget is done: the job is over
inline constexpr int kExitJobFailed = 3;    // restart cap hit, node lost: reason in status and log
// Drained before the budget (SIGTERM, scancel, preemption, time limit, requeue):
// paused, not over. The next launch of the same config and work_dir resumes it.
inline constexpr int kExitJobDrained = 4;

struct CoordinatorOptions {
  // Interface of the control and metrics sockets: "" = cluster.coordinator_host
  // (a name is resolved to its address), "*" = every interface.
  std::string bind_host;
  bool fresh = false;  // delete the job's database, every stage's checkpoints and rollouts
};

// Path of the coordinator's database for a job.
std::filesystem::path coordinator_db_path(const JobConfig& config);

// Runs (or resumes) the job until it ends; returns kExitJobFinished,
// kExitJobDrained or kExitJobFailed. SIGTERM/SIGINT drain the job. Throws std::runtime_error when
// it cannot start (port taken, database of another job, unreadable keys).
int run_coordinator(const JobConfig& config, const CoordinatorOptions& options);

}  // namespace saccade::coordinator
