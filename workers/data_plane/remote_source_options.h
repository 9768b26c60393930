// What a learner's RemoteBatchSource (batch_client.h) needs to ask data actors
// for batches: a plain struct, filled from the job config by
// workers/job_options/data_options.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "control/control.h"
#include "dataloader/sharded_sampler.h"
#include "dataloader/views.h"
#include "schemas/wire.h"

namespace saccade::data_plane {

struct RemoteSourceOptions {
  std::vector<std::string> endpoints;  // the learner's data actors (assignment().peers)
  data::ShardOptions shard;            // this learner's shard of the epoch
  data::ViewOptions views;
  int64_t batch_size = 0;  // images per batch on this rank
  uint64_t seed = 0;       // root of the views' random draws (view_seed_at)
  int queue_depth = 2;     // requests outstanding per data actor (data.queue_depth)
  std::chrono::milliseconds request_timeout{10000};  // data.request_timeout_ms
  control::Security security;                        // CURVE client keys when on
  wire::SenderInfo sender;                           // this learner in its envelopes
  wire::Expect expect;                               // job id and frame size limit
};

}  // namespace saccade::data_plane
