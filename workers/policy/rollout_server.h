// The rollout actor's serving loop: GRPO rollouts against the frozen backbone
// and task head, for a policy learner (workers/policy/rollout_client.h).
//
// Stateless apart from the policy weights: the learner sends Weights{version}
// and then RolloutRequest{version, images, seeds, ...}; the server answers one
// RolloutGroup per image, drawn exactly as LocalRollouts would draw it (every
// draw of a trace comes from its image's seed). A request for a version it
// does not hold is answered Ack{ok = false} so the learner sends the weights
// again. Every frame is validated; garbage, another job's frames and
// unreasonable requests are dropped and logged, never a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "model/options.h"
#include "schemas/wire.h"
#include "workers/policy/gaze_traces.h"
#include "workers/runtime/request_server.h"

namespace saccade::policy {

class RolloutSource;

struct RolloutServerOptions : runtime::RequestServerOptions {  // sender's role: ROLLOUT
  int threads = 1;                                             // glimpse-cutting threads
  // Runs the traces instead of the backbone given to the server (`saccade
  // bench rollouts`: a backbone whose cost is simulated); null = the backbone.
  std::shared_ptr<RolloutSource> source;
};

class RolloutServer {
 public:
  // Borrows the frozen backbone (it must outlive it), copies the head, builds its
  // own policy of `policy_options` (weights arrive from the learner). Binds
  // the socket; throws zmq::error_t when it cannot.
  RolloutServer(model::FovealBackboneImpl& backbone, const probe::TaskHead& head,
                const model::PolicyOptions& policy_options,
                std::shared_ptr<const data::Dataset> dataset, data::ViewOptions views,
                RolloutServerOptions options);
  ~RolloutServer();
  RolloutServer(const RolloutServer&) = delete;
  RolloutServer& operator=(const RolloutServer&) = delete;

  // Answers until `stopping()` is true; calls it at least every 50 ms while idle.
  void serve(const std::function<bool()>& stopping);

  std::string endpoint() const;  // the bound endpoint, wildcard port resolved
  uint64_t requests_served() const { return requests_.load(); }
  uint64_t traces_served() const { return traces_.load(); }
  uint64_t dropped() const;  // frames and requests refused

 private:
  void handle(runtime::Exchange& exchange);  // one Weights or RolloutRequest

  struct Impl;
  std::unique_ptr<Impl> impl_;  // server, policy and dataset: owned
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> traces_{0};
};

}  // namespace saccade::policy
