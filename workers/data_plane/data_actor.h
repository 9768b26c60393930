// The data actor: decodes images and cuts their SSL views for learners.
//
// Stateless by design (schemas/messages.capnp, BatchRequest): a learner owns
// the sampler and sends BatchRequest{batchId, indices, seeds}; the actor
// answers with one Batch of the same id, cut by data::make_ssl_views exactly as
// data::SslLoader would. Any data actor can serve any request, so the requests
// of a slow or dead one go to another. Every frame is validated; garbage,
// another job's frames, oversized frames and unreasonable requests are dropped
// and logged, never a crash. Torch-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/control.h"
#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "schemas/wire.h"
#include "workers/runtime/actor_runtime.h"
#include "workers/runtime/request_server.h"

namespace saccade::data_plane {

struct BatchServerOptions : runtime::RequestServerOptions {  // sender's role: DATA
  int threads = 1;  // view-cutting threads (data.loader_threads)
};

// The serving loop of a data actor, usable without the actor runtime (tests).
class BatchServer {
 public:
  // Binds the socket. Throws std::invalid_argument for a dataset whose
  // channels differ from the views', zmq::error_t when it cannot bind.
  BatchServer(std::shared_ptr<const data::Dataset> dataset, data::ViewOptions views,
              BatchServerOptions options);
  ~BatchServer();
  BatchServer(const BatchServer&) = delete;
  BatchServer& operator=(const BatchServer&) = delete;

  // Answers requests until `stopping()` is true; calls it at least every 50 ms
  // while idle and between requests. Rethrows a data error (a dataset whose
  // every image is corrupt, a throwing dataset): like SslLoader, not skippable.
  void serve(const std::function<bool()>& stopping);

  std::string endpoint() const;        // the bound endpoint, wildcard port resolved
  std::string local_endpoint() const;  // the bound ipc:// endpoint, "" when none
  uint64_t batches_served() const { return batches_.load(); }
  uint64_t images_served() const { return images_.load(); }
  uint64_t dropped() const;  // frames and requests refused

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // server, pool and dataset: owned
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> images_{0};
};

// The DATA role body: loads the training split (dataset_spec(config, false)),
// serves at assignment().endpoint with data.loader_threads threads and
// reports (batches served, images/s). Exits 0 when the runtime asks it to stop,
// 1 on a data error.
std::unique_ptr<runtime::ActorBody> make_data_actor();

}  // namespace saccade::data_plane
