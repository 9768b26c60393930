#include "workers/job_options/remote_batch_options.h"

#include "control/control.h"
#include "schemas/wire.h"
#include "workers/job_options/data_options.h"

namespace saccade::job_options {

data_plane::RemoteSourceOptions batch_source_options(const JobConfig& config,
                                                     const control::Assignment& me,
                                                     data::ShardOptions shard, int64_t batch) {
  data_plane::RemoteSourceOptions o;
  o.endpoints = me.peers;
  o.shard = shard;
  o.views = view_options(config);
  o.batch_size = batch;
  o.seed = view_seed_root(config);
  o.queue_depth = static_cast<int>(config.data.queue_depth);
  o.request_timeout = std::chrono::milliseconds(config.data.request_timeout_ms);
  o.security = control::load_security(config.security, /*as_server=*/false);
  o.sender = {config.job.name, wire::Role::LEARNER, me.rank, me.node};
  o.expect = control::expect_for(config);
  return o;
}

}  // namespace saccade::job_options
