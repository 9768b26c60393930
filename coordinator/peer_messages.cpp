#include "coordinator/peer_messages.h"

#include "control/control.h"
#include "control/placement.h"

namespace saccade::coordinator {

PeerMessages::PeerMessages(const JobConfig& config, const JobState& job, PeerSender& peers)
    : config_(config), job_(job), peers_(peers) {}

void PeerMessages::send(const std::string& id, const PeerSender::Fill& fill) {
  peers_.try_send_to(id, fill);
}

void PeerMessages::heartbeat(const std::string& id) {
  send(id, [](wire::Envelope::Builder e) {
    e.getBody().initHeartbeat().setState(wire::ActorState::RUNNING);
  });
}

void PeerMessages::start_actor(const ActorRecord& a) {
  send(control::agent_identity(a.assignment.node), [&](wire::Envelope::Builder e) {
    auto cmd = e.getBody().initActorCommand();
    cmd.setAction(wire::ActorCommand::Action::START);
    control::write_assignment(a.assignment, cmd.initAssignment());
    cmd.setRestarts(a.restarts);
  });
}

void PeerMessages::kill_actor(const ActorRecord& a, const std::string& reason) {
  send(control::agent_identity(a.assignment.node), [&](wire::Envelope::Builder e) {
    auto cmd = e.getBody().initActorCommand();
    cmd.setAction(wire::ActorCommand::Action::KILL);
    control::write_assignment(a.assignment, cmd.initAssignment());
    cmd.setReason(reason);
  });
}

// The learners meet through this coordinator's rendezvous store (StoreRequest), so the
// rendezvous names no store address.
void PeerMessages::rendezvous(const ActorRecord& learner) {
  int32_t world = 0;
  for (const auto& [k, a] : job_.actors)
    if (k.first == wire::Role::LEARNER) ++world;
  send(control::actor_identity(wire::Role::LEARNER, learner.assignment.rank),
       [&](wire::Envelope::Builder e) {
         auto r = e.getBody().initRendezvous();
         r.setWorldSize(world);
         r.setRank(learner.assignment.rank);
         r.setResumeFromStep(job_.generation_resume_step);
         r.setCollectiveTimeoutMs(config_.cluster.collective_timeout_s * 1000);
       });
}

void PeerMessages::shutdown(const std::string& id, bool checkpoint_first) {
  send(id, [&](wire::Envelope::Builder e) {
    auto s = e.getBody().initShutdown();
    s.setReason(job_.reason.empty() ? job_phase_name(job_.state) : job_.reason);
    s.setCheckpointFirst(checkpoint_first);
  });
}

void PeerMessages::refuse(const std::string& id, const std::string& why) {
  send(id, [&](wire::Envelope::Builder e) {
    auto r = e.getBody().initRefusal();
    r.setReason(why);
    r.setJobId(config_.job.name);
  });
}

void PeerMessages::assign_roles(const NodeRecord& node) {
  send(control::agent_identity(node.spec.name), [&](wire::Envelope::Builder e) {
    auto assign = e.getBody().initAssignRoles();
    assign.setNodeName(node.spec.name);
    assign.setConfigToml(to_toml(config_));
    std::vector<const ActorRecord*> mine;
    for (const auto& [k, a] : job_.actors)
      if (a.assignment.node == node.spec.name) mine.push_back(&a);
    auto list = assign.initActors(static_cast<unsigned>(mine.size()));
    for (size_t i = 0; i < mine.size(); ++i)
      control::write_assignment(mine[i]->assignment, list[static_cast<unsigned>(i)]);
  });
}

void PeerMessages::not_registered(const std::string& node) {
  send(control::agent_identity(node), [](wire::Envelope::Builder e) {
    auto ack = e.getBody().initAck();
    ack.setOk(false);
    ack.setError("not registered");
  });
}

void PeerMessages::store_replies(const std::vector<control::RendezvousStore::Delivery>& answers) {
  for (const auto& d : answers)
    send(d.to, [&](wire::Envelope::Builder e) {
      control::write_store_reply(d.answer, e.getBody().initStoreReply());
    });
}

}  // namespace saccade::coordinator
