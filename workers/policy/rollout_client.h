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
#include <optional>
#include <string>
#include <vector>

#include "control/control.h"
#include "schemas/wire.h"
#include "workers/policy/rollout_codec.h"
#include "workers/policy/rollout_source.h"
#include "workers/runtime/request_client.h"

namespace saccade::policy {

struct RolloutClientOptions {
  std::vector<std::string> endpoints;                // the rollout actors
  int64_t n_state = 0, width = 0;                    // the backbone's state, to check groups
  std::chrono::milliseconds request_timeout{60000};  // silence before a part goes elsewhere
  control::Security security;                        // CURVE client keys when on
  wire::SenderInfo sender;                           // this learner in its envelopes
  wire::Expect expect;                               // job id and frame size limit
  std::function<bool()> stopping;                    // a drain: run() throws; may be empty
};

class RolloutClient : public RolloutSource, private runtime::RequestProtocol {
 public:
  // Connects to every endpoint. Throws std::invalid_argument naming a bad option.
  explicit RolloutClient(RolloutClientOptions options);
  ~RolloutClient() override;

  Traces run(model::GazePolicyImpl* policy, const RolloutBatch& batch) override;

  uint64_t resent() const { return client_->resent(); }    // parts sent again (timeout or refusal)
  uint64_t dropped() const { return client_->dropped(); }  // frames and groups refused

 private:
  struct Part;  // consecutive images of a batch, one request

  Part* find(uint64_t id);  // a part of the batch in flight; nullptr when none
  bool send(uint64_t id, size_t peer, runtime::PeerLink& link) override;
  runtime::Answer accept(size_t peer, wire::Message&& message) override;
  void redialed(size_t peer) override;

  RolloutClientOptions options_;
  std::vector<std::optional<uint64_t>> versions_;  // per actor: the policy version it was sent
  // The batch in flight (run()'s): its parts, their request ids from first_id_ on.
  const RolloutBatch* batch_ = nullptr;
  const std::string* weights_ = nullptr;  // its policy as safetensors, "" for random gazes
  std::vector<Part> parts_;
  uint64_t first_id_ = 0;
  uint64_t next_id_ = 1;    // request id of the next part made
  bool warmed_up_ = false;  // the first batch waited for the actors\' connections
  std::unique_ptr<runtime::RequestClient> client_;  // sockets and re-sends; borrows *this
};

}  // namespace saccade::policy
