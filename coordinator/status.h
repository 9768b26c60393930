// A job's status as one plain struct, carried by StatusReply and printed as
// a table (`saccade status`), JSON (`--json`) or Prometheus text (metrics port).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/control.h"
#include "schemas/wire.h"

namespace saccade::coordinator {

struct ActorRow {
  std::string role;
  int32_t rank = 0;
  std::string node;
  uint32_t pid = 0;
  std::string state;
  int64_t heartbeat_age_ms = -1;  // -1: none yet
  uint32_t restarts = 0;
  int64_t step = 0;
  double items_per_second = 0;
  bool straggler = false;
};

struct NodeRow {
  std::string name;
  std::string host;
  uint32_t cores = 0;
  uint32_t gpus = 0;
  uint64_t memory_bytes = 0;
  std::string state;  // waiting, registered, lost, exited
  int64_t heartbeat_age_ms = -1;
};

struct StageRow {
  std::string name;
  std::string state;  // pending, running, finished
  double seconds = 0;
  int64_t last_step = -1;  // its newest committed checkpoint; -1: none
};

struct JobStatus {
  std::string job_id;
  std::string stage;        // the stage running now (the last one once finished)
  int32_t stage_index = 0;  // into stages
  std::vector<StageRow> stages;
  std::string state;   // running, draining, finished, drained, failed
  std::string reason;  // why the job failed or drained
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: unknown
  double images_per_second = 0;
  double loss = 0;                  // NaN: not reported yet
  double lr = 0;                    // NaN: not reported yet
  double knn = 0;                   // last k-NN check of the teacher, 0..1; NaN: none yet
  double target_entropy_ratio = 0;  // entropy of the teacher's targets / ln K; NaN: not reported
  double prototypes_used = 0;       // NaN: not reported
  // Every metric the stage's learners reported last (loss, lr, knn, ... and the
  // policy learner's rollout_s / update_s per epoch), by name.
  std::map<std::string, double> metrics;
  int64_t last_checkpoint_step = -1;
  int64_t last_checkpoint_age_ms = -1;
  uint64_t generation = 0;
  std::vector<ActorRow> actors;
  std::vector<NodeRow> nodes;
};

void write_status(const JobStatus& s, wire::StatusReply::Builder out);
JobStatus read_status(wire::StatusReply::Reader in);

// The job's model TFLOP/s (images/s of all learners x the learners' reported FLOPs per
// image) and MFU (the learners' achieved share of their device's peak, as they report
// it); NaN while not reported (MFU also when the device's peak is unknown).
double job_tflops(const JobStatus& s);
double job_mfu(const JobStatus& s);

std::string status_table(const JobStatus& s);
std::string status_json(const JobStatus& s);
std::string status_prometheus(const JobStatus& s);

// Asks the coordinator at `endpoint` (tcp://HOST:PORT) for its status. Returns
// nullopt with `why` set when no valid reply came within `timeout` (coordinator
// down, or refused us: wrong CURVE keys, other job id). A Refusal names the job
// that coordinator runs: it is put in `*running_job` when given.
std::optional<JobStatus> query_status(const std::string& endpoint, const JobConfig& config,
                                      const control::Security& security,
                                      std::chrono::milliseconds timeout, std::string& why,
                                      std::string* running_job = nullptr);

}  // namespace saccade::coordinator
