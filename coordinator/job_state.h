// The coordinator's model of a job: nodes, actors and the job's own state,
// with their persistence in the StateStore. Internal to coordinator/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "control/placement.h"
#include "coordinator/state_store.h"
#include "coordinator/status.h"

namespace saccade::coordinator {

enum class Phase {
  kPending,     // never started
  kStarting,    // start sent, no heartbeat yet
  kRunning,     // heartbeating
  kDraining,    // told to drain, or drains on its own (SIGTERM)
  kRestarting,  // failed, restart due at restart_at_ms
  kExited,      // ended cleanly (finished or drained): never restarted
  kFailed,      // ended in failure outside a running job: never restarted
};
const char* phase_name(Phase p);
bool alive(Phase p);  // starting, running or draining

struct ActorRecord {
  control::Assignment assignment;
  Phase phase = Phase::kPending;
  uint32_t pid = 0;
  uint32_t restarts = 0;
  int64_t step = 0;
  double items_per_second = 0;
  bool straggler = false;
  bool announced_drain = false;
  int64_t last_heartbeat_ms = -1;
  int64_t started_ms = -1;
  int64_t restart_at_ms = -1;
  int64_t kill_sent_ms = -1;
  std::string last_reason;  // why it was killed (hung), for the failure message
};

struct NodeRecord {
  NodeSpec spec;
  enum class State { kWaiting, kRegistered, kLost, kExited } state = State::kWaiting;
  uint32_t cores = 0, gpus = 0;
  uint64_t memory_bytes = 0;
  int64_t last_heartbeat_ms = -1;
  int64_t since_ms = 0;  // when it entered its state
};

using ActorKey = std::pair<wire::Role, int32_t>;

// The job's own state; only kFinished is final (drained and failed jobs resume
// on the next launch).
enum class JobPhase { kRunning, kDraining, kFinished, kDrained, kFailed };
// "running", "draining", "finished", "drained", "failed": the database's and status's words.
const char* job_phase_name(JobPhase p);
// The phase a stored name stands for; kRunning for an unknown one.
JobPhase job_phase_from_name(const std::string& name);

// When a stage of the job began and ended (wire::now_ns; 0: not yet).
struct StageRecord {
  int64_t started_ns = 0;
  int64_t finished_ns = 0;
  int64_t last_step = -1;  // its newest committed checkpoint when it finished; -1: none
};

// Everything the coordinator knows about its job. Mutations mark what changed;
// flush() writes it in one atomic batch.
class JobState {
 public:
  JobState(const JobConfig& config, StateStore& store, int64_t now_ms);

  // Refuses a database of another job; resumes one of this job at the stage
  // it was in, with that stage's actors. A job that drained or failed in an
  // earlier launch runs again from its last committed checkpoint (relaunch);
  // a finished job stays ended unless its config lists a stage it has not run.
  void load(int64_t now_ms);
  void flush(bool sync = false);
  // Ends the stage running now and places the next one's actors (pending),
  // with a fresh restart budget, a new learner generation and that stage's
  // own checkpoints. Returns false when it was the last stage. Throws
  // std::runtime_error when the next stage's store cannot open; the ending
  // stage is then recorded as finished and nothing else changes.
  bool advance_stage(int64_t now_ms);

  // A new learner generation (a learner lost, a new stage or launch), resuming from the
  // newest committed checkpoint.
  void begin_generation();

  std::map<ActorKey, ActorRecord> actors;
  std::map<std::string, NodeRecord> nodes;
  JobPhase state = JobPhase::kRunning;
  std::string reason;
  uint64_t generation = 1;
  // The checkpoint every learner of this generation resumes from: the newest commit when
  // the generation began. Fixed for the generation, so that a commit of the generation
  // before (it lands after the bump) cannot start two learners from different steps.
  int64_t generation_resume_step = -1;
  int64_t checkpoint_step = -1;
  uint64_t checkpoint_bytes = 0;
  int64_t checkpoint_time_ns = 0;
  std::map<wire::Role, uint32_t> role_restarts;
  std::map<std::string, double> metrics;  // the running stage's learner 0's last figures
  size_t stage_index = 0;                 // into job.stages: the stage running now
  std::map<std::string, StageRecord> stages;

  // The stage running now (or the last one, once the job finished).
  const std::string& stage() const { return config_.job.stages.at(stage_index); }
  bool ended() const {
    return state == JobPhase::kFinished || state == JobPhase::kDrained ||
           state == JobPhase::kFailed;
  }
  bool finished() const { return state == JobPhase::kFinished; }
  void mark(const ActorRecord& a) {
    dirty_actors_.push_back({a.assignment.role, a.assignment.rank});
  }
  void mark_job() { dirty_job_ = true; }
  void mark_metrics() { dirty_metrics_ = true; }

  // Status as shown by `saccade status`, with stragglers recomputed.
  JobStatus status(int64_t now_ms);
  // Flags actors far behind their role's median step or throughput.
  void update_stragglers();

 private:
  void relaunch(int64_t now_ms);
  // The running stage's actors, as placed (pending), then as stored, if they were.
  void place_stage(int64_t now_ms);
  void load_checkpoint_index();

  const JobConfig& config_;  // not owned
  StateStore& store_;        // not owned
  std::vector<ActorKey> dirty_actors_;
  bool dirty_job_ = false;
  bool dirty_metrics_ = false;
};

}  // namespace saccade::coordinator
