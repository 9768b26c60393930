// What the coordinator tells its agents and actors, built over a PeerSender:
// every message it sends but checkpoints (CheckpointService) and status
// replies. Fire and forget: a message to a full queue or an unknown peer is
// dropped, since each of these is sent again (heartbeats, starts and kills on
// a later tick, rendezvous on the next heartbeat) or re-asked by the peer.
// Internal to coordinator/.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "control/rendezvous_store.h"
#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"

namespace saccade::coordinator {

class PeerMessages {
 public:
  // All borrowed; they outlive it. `job` gives the learners' world and resume step and
  // the reason a shutdown names.
  PeerMessages(const JobConfig& config, const JobState& job, PeerSender& peers);

  // One message to peer `id`.
  void send(const std::string& id, const PeerSender::Fill& fill);
  // The liveness heartbeat each tick sends every registered agent and live actor.
  void heartbeat(const std::string& id);
  // To the actor's agent: start it, counting `a.restarts`; kill its process group.
  void start_actor(const ActorRecord& a);
  void kill_actor(const ActorRecord& a, const std::string& reason);
  // To a learner: the current generation's world size, its rank and the resume step.
  void rendezvous(const ActorRecord& learner);
  // Asks peer `id` to stop, naming the job's reason; `checkpoint_first` when it drains.
  void shutdown(const std::string& id, bool checkpoint_first);
  // A final answer to a peer this coordinator will not serve.
  void refuse(const std::string& id, const std::string& why);
  // To a registered agent: its node name, the job's config and the actors placed on it.
  void assign_roles(const NodeRecord& node);
  // To an agent that heartbeats without being registered here: register again.
  void not_registered(const std::string& node);
  // Answers of the rendezvous store; one to a learner that is gone is dropped (it re-asks).
  void store_replies(const std::vector<control::RendezvousStore::Delivery>& answers);

 private:
  const JobConfig& config_;  // not owned
  const JobState& job_;      // not owned
  PeerSender& peers_;        // not owned
};

}  // namespace saccade::coordinator
