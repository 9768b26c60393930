// A PeerSender that records what each peer was sent, as the peer would read it:
// the coordinator's pieces (checkpoint service, supervisor, stage runner) are
// tested against it without sockets or processes.
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"
#include "schemas/wire.h"

namespace saccade::coordinator {

class RecordingPeers : public PeerSender {
 public:
  using Kind = wire::Envelope::Body::Which;
  struct Sent {
    std::string id;
    Kind kind = Kind::HEARTBEAT;
    bool committed = false;  // a CheckpointCommitted (of `step`); otherwise see `kind`
    int64_t step = -1;
    bool ok = true;                 // false: an Ack that refuses, with `error`
    std::string error;              // an Ack's error; a Shutdown's or an ActorCommand's reason
    bool start = false;             // an ActorCommand: start (else kill) `actor`
    ActorKey actor{};               // of an ActorCommand or a Rendezvous
    uint32_t restarts = 0;          // an ActorCommand's restarts so far
    bool checkpoint_first = false;  // a Shutdown's
    int64_t resume_from_step = -1;  // a Rendezvous's
  };
  PeerSender::Sent try_send_to(const std::string& id, const Fill& fill) override {
    capnp::MallocMessageBuilder m;
    auto e = m.initRoot<wire::Envelope>();
    fill(e);
    const auto body = e.getBody().asReader();
    Sent s;
    s.id = id;
    s.kind = body.which();
    if (body.isCheckpointCommitted()) {
      s.committed = true;
      s.step = body.getCheckpointCommitted().getStep();
    } else if (body.isAck()) {
      s.ok = body.getAck().getOk();
      s.error = body.getAck().getError().cStr();
    } else if (body.isActorCommand()) {
      const auto cmd = body.getActorCommand();
      s.start = cmd.getAction() == wire::ActorCommand::Action::START;
      s.actor = {cmd.getAssignment().getRole(), cmd.getAssignment().getRank()};
      s.restarts = cmd.getRestarts();
      s.error = cmd.getReason().cStr();
    } else if (body.isShutdown()) {
      s.error = body.getShutdown().getReason().cStr();
      s.checkpoint_first = body.getShutdown().getCheckpointFirst();
    } else if (body.isRendezvous()) {
      s.actor = {wire::Role::LEARNER, body.getRendezvous().getRank()};
      s.resume_from_step = body.getRendezvous().getResumeFromStep();
    }
    sent.push_back(std::move(s));
    return PeerSender::Sent::kOk;
  }
  // The messages of one kind, in the order they were sent.
  std::vector<Sent> of(Kind kind) const {
    std::vector<Sent> out;
    for (const Sent& s : sent)
      if (s.kind == kind) out.push_back(s);
    return out;
  }
  std::vector<Sent> sent;
};

}  // namespace saccade::coordinator
