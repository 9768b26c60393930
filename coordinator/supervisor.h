// The supervisor keeps a job's nodes and actors alive: it adopts or starts
// the actors of a node whose agent registers, watches heartbeats both ways (a
// silent agent's node is lost, a silent actor is killed as hung), restarts a
// failed actor after a backoff that doubles with each restart of its role,
// fails the job past cluster.max_restarts, and begins a new learner
// generation when a learner is lost. Time is an argument (steady
// milliseconds), so these decisions can be tested without processes.
// Internal to coordinator/; driven by the coordinator's loop, single-threaded.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"
#include "coordinator/peer_messages.h"
#include "coordinator/stage_runner.h"
#include "schemas/wire.h"

namespace saccade::coordinator {

class Supervisor {
 public:
  // All borrowed; they outlive it.
  Supervisor(const JobConfig& config, JobState& job, StageRunner& stages, PeerMessages& peers,
             CheckpointService& checkpoints);

  // --- what agents report --------------------------------------------------
  // `node`'s agent registers (again): it gets its roles, the actors it still runs are
  // adopted, pending ones start, and those that ended meanwhile count as exited.
  void on_register(NodeRecord& node, wire::RegisterNode::Reader r, int64_t now);
  // An agent's heartbeat; one from a node not registered here is asked to register.
  void on_agent_heartbeat(NodeRecord& node, int64_t now);
  // An event of `node`'s agent itself (it drains or ends) or of an actor it runs (it
  // started or ended). Returns why it was dropped, "" when taken.
  std::string on_agent_event(NodeRecord& node, wire::ActorEvent::Reader ev, int64_t now);

  // --- what actors report --------------------------------------------------
  // A live actor's heartbeat from process `pid`, sent in learner generation `generation`:
  // a learner of an older generation is sent the current rendezvous.
  void on_heartbeat(ActorRecord& a, uint32_t pid, wire::Heartbeat::Reader hb, uint64_t generation,
                    int64_t now);
  // A live actor's process ended: exited cleanly, failed while the job or stage ends, or
  // restarts after a backoff; the job fails past the restart cap or when its inputs
  // were refused (the same inputs would fail again).
  void on_exit(ActorRecord& a, int exit_code, int signal, const std::string& reason, int64_t now);

  // Once per heartbeat interval: heartbeats out, lost nodes (the job fails after
  // cluster.reconnect_grace_s), hung actors killed, pending and due restarts started.
  void tick(int64_t now);

 private:
  // Sends `a`'s agent a start, when its node is registered.
  void start_actor(ActorRecord& a, int64_t now);

  const JobConfig& config_;         // not owned
  JobState& job_;                   // not owned
  StageRunner& stages_;             // not owned: ends the job (cap, lost node), stage ending
  PeerMessages& peers_;             // not owned
  CheckpointService& checkpoints_;  // not owned: a download to an actor that ended is dropped
  const int64_t timeout_ms_;        // a peer silent this long is lost (heartbeat_misses)
};

}  // namespace saccade::coordinator
