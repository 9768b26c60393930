#include "workers/job_options/remote_batch_options.h"

#include <utility>

#include "workers/job_options/data_options.h"
#include "workers/job_options/link_options.h"

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
  PeerLink link = peer_link(config, me, /*as_server=*/false);
  o.security = std::move(link.security);
  o.sender = std::move(link.sender);
  o.expect = std::move(link.expect);
  return o;
}

}  // namespace saccade::job_options
