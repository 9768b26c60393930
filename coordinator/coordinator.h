// `saccade coordinator CONFIG`: owns one job. Places actors on the nodes whose
// agents register, decides restarts (count, backoff, cap), watches heartbeats
// both ways, hands learners their rendezvous and generation, serves status
// (control socket) and Prometheus text (metrics port), and keeps all of this
// in RocksDB under job.work_dir so that a restarted coordinator resumes the job.
#pragma once

#include <filesystem>
#include <string>

#include "common/config.h"

namespace saccade::control {

inline constexpr int kExitJobFinished = 0;  // finished, or drained (SIGTERM / preemption)
inline constexpr int kExitJobFailed = 3;    // restart cap hit, node lost: reason in status and log

struct CoordinatorOptions {
  std::string bind_host = "*";  // interface of the control and metrics sockets
};

// Path of the coordinator's database for a job.
std::filesystem::path coordinator_db_path(const JobConfig& config);

// Runs (or resumes) the job until it ends; returns kExitJobFinished or
// kExitJobFailed. SIGTERM/SIGINT drain the job. Throws std::runtime_error when
// it cannot start (port taken, database of another job, unreadable keys).
int run_coordinator(const JobConfig& config, const CoordinatorOptions& options);

}  // namespace saccade::control
