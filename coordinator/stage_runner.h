// The job's course through its stages: what the running stage may read of the
// stages before it, the end of a stage (its actors stopped, then the next
// stage's placed), a drain, and the end of the job, after which the loop
// lingers for status clients. Time is an argument (steady milliseconds), so
// these decisions can be tested without processes. Internal to coordinator/;
// driven by the coordinator's loop, single-threaded.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "coordinator/job_state.h"
#include "coordinator/peer_messages.h"
#include "coordinator/stage_inputs.h"
#include "coordinator/state_store.h"

namespace saccade::coordinator {

// What the actors' phases say about the running stage, counted once per tick.
struct StageProgress {
  bool any_alive = false;      // some actor is starting, running or draining
  bool learners_done = false;  // the actors that complete the stage exist and all exited
};

class StageRunner {
 public:
  // All borrowed; they outlive it.
  StageRunner(const JobConfig& config, JobState& job, StateStore& store, StageInputs& inputs,
              PeerMessages& peers);

  // Gives the running stage the outputs of the stages before it (StageInputs).
  void begin_stage();
  // A running job drains: live actors checkpoint and stop, within cluster.drain_timeout_s.
  void begin_drain(const std::string& why, int64_t now);
  // Ends the job in `state` (finished, drained or failed) and stops its live actors;
  // nothing once it ended. `why` "" keeps the reason it had.
  void end_job(JobPhase state, const std::string& why, int64_t now);
  // Ends the job drained and the loop at once (a second signal).
  void end_now(int64_t now);
  // Once the job has ended, the loop ends when its agents are told, without lingering for
  // status (cluster.status_linger_ms): the job finished in an earlier launch, or a signal
  // asked the coordinator to stop.
  void skip_linger() { linger_ = false; }

  // The actors' phases before this tick's starts (an actor started now has not run).
  StageProgress progress() const;
  // Once per tick, after the supervisor's: ends the stage whose learners are done, a
  // drain that nobody is left for or whose time is up, and the loop once the ended
  // job's agents left (or drain_timeout_s + status_linger_ms passed).
  void tick(int64_t now, const StageProgress& progress);

  // The running stage's learners are done and its actors are being stopped: no actor
  // starts or restarts meanwhile.
  bool stage_ending() const { return stage_ending_ms_ >= 0; }
  // The loop may stop.
  bool done() const { return done_; }

 private:
  // Stops the stage's actors (killed after cluster.drain_timeout_s), then begins the
  // next stage, or finishes the job after the last one.
  void end_stage(int64_t now, bool any_alive);
  // Tells the ended job's agents to stop; done once they left and status lingered.
  void finish_when_quiet(int64_t now);

  const JobConfig& config_;  // not owned
  JobState& job_;            // not owned
  StateStore& store_;        // not owned
  StageInputs& inputs_;      // not owned
  PeerMessages& peers_;      // not owned
  int64_t drain_deadline_ms_ = 0;
  int64_t stage_ending_ms_ = -1;  // when the running stage's learners were all done; -1: not yet
  int64_t ended_ms_ = -1;         // when the job ended; -1: not yet
  bool done_ = false;
  bool linger_ = true;  // serve status for status_linger_ms after the job ends
};

}  // namespace saccade::coordinator
