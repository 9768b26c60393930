// The policy learner's side of GRPO rollouts on rollout actors
// (workers/policy/rollout_server.h): a RolloutSource that splits each rollout
// batch across the actors, sends each the policy's weights when its version
// changed, and joins their groups in image order. Since every draw of a trace
// comes from its image's seed, the result is the one LocalRollouts gives, for
// any number of actors. An actor that answers nothing of its part for
// request_timeout is re-dialed and its part goes to another; stale and
// duplicate groups are ignored; malformed frames and groups are dropped,
// logged and asked for again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control/control.h"
#include "schemas/wire.h"
#include "workers/policy/rollout_codec.h"
#include "workers/policy/rollout_source.h"

namespace saccade::workers {

struct RolloutClientOptions {
  std::vector<std::string> endpoints;                // the rollout actors
  int64_t n_state = 0, width = 0;                    // the backbone's state, to check groups
  std::chrono::milliseconds request_timeout{60000};  // silence before a part goes elsewhere
  control::Security security;                        // CURVE client keys when on
  wire::SenderInfo sender;                           // this learner in its envelopes
  wire::Expect expect;                               // job id and frame size limit
  std::function<bool()> stopping;                    // a drain: run() throws; may be empty
};

class RolloutClient : public RolloutSource {
 public:
  // Connects to every endpoint. Throws std::invalid_argument naming a bad option.
  explicit RolloutClient(RolloutClientOptions options);
  ~RolloutClient() override;

  Traces run(model::GazePolicyImpl& policy, const RolloutBatch& batch) override;

  uint64_t resent() const { return resent_; }    // parts sent again (timeout or refusal)
  uint64_t dropped() const { return dropped_; }  // frames and groups refused

 private:
  struct Actor;  // one rollout actor's socket and the policy version it holds
  struct Part;   // consecutive images of a batch given to one actor

  void dial(Actor& actor);
  // Sends `part` to its actor (with the weights first when that actor lacks
  // them); false when the connection is not up yet.
  bool send_part(Part& part, const RolloutBatch& batch, const std::string& weights);

  RolloutClientOptions options_;
  zmq::context_t context_;  // owns the sockets' I/O; outlives actors_
  std::vector<std::unique_ptr<Actor>> actors_;
  control::EnvelopeWriter writer_;
  control::DropLog drops_;
  uint64_t next_request_ = 1;
  uint64_t resent_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace saccade::workers
