#include "workers/job_options/remote_batch_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "workers/data_plane/batch_codec.h"
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

std::string learner_frame_problem(const JobConfig& config) {
  // Nodes from an allocation not yet resolved (cluster.nodes_from = "slurm") are a template:
  // their count is known once the launch resolves them (saccade coordinator checks then).
  if (config.cluster.nodes_from == "slurm") return "";
  // A valid config that pretrains has a data actor per learner (config_schema.h): the
  // learners are fed by data actors.
  const auto& stages = config.job.stages;
  if (std::find(stages.begin(), stages.end(), "pretrain") == stages.end()) return "";
  const int64_t learners = config.cluster.total(&NodeSpec::learners);
  if (learners < 1 || config.ssl.batch_size % learners != 0) return "";
  const int64_t batch = config.ssl.batch_size / learners;
  return data_plane::frame_limit_problem(
      view_options(config), batch, static_cast<size_t>(config.cluster.max_message_bytes),
      fmt::format("a learner's batch of {} images (ssl.batch_size = {} over {} learner{})", batch,
                  config.ssl.batch_size, learners, learners == 1 ? "" : "s"));
}

}  // namespace saccade::job_options
