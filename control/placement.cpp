#include "control/placement.h"

#include <fmt/format.h>

#include <cctype>

#include <sys/un.h>
#include <map>

namespace saccade::control {

std::string data_ipc_endpoint(const JobConfig& config, int32_t rank) {
  if (config.cluster.ipc_dir.empty()) return "";
  std::string job = config.job.name;
  for (char& ch : job)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  const std::string path = fmt::format("{}/{}-{}/data-{}", config.cluster.ipc_dir, job,
                                       config.cluster.coordinator_port, rank);
  if (path.size() >= sizeof(sockaddr_un::sun_path)) return "";
  return "ipc://" + path;
}

std::vector<Assignment> place_actors(const JobConfig& config) {
  int64_t total_learners = 0;
  for (const NodeSpec& n : config.cluster.nodes) total_learners += n.learners;
  std::vector<Assignment> out;
  std::map<wire::Role, int32_t> next_rank;
  for (const NodeSpec& node : config.cluster.nodes) {
    const std::pair<wire::Role, int64_t> counts[] = {{wire::Role::DATA, node.data_actors},
                                                     {wire::Role::LEARNER, node.learners},
                                                     {wire::Role::ROLLOUT, node.rollout_actors},
                                                     {wire::Role::EVAL, node.eval_actors}};
    for (auto [role, count] : counts) {
      for (int64_t local = 0; local < count; ++local) {
        Assignment a;
        a.role = role;
        a.rank = next_rank[role]++;
        a.local_rank = static_cast<int32_t>(local);
        a.node = node.name;
        a.threads = static_cast<uint32_t>(node.threads);
        const bool gpu = node.gpus > 0 && role != wire::Role::DATA;
        a.device = gpu ? fmt::format("cuda:{}", local % node.gpus) : "cpu";
        if (role == wire::Role::DATA) {
          a.endpoint =
              fmt::format("tcp://{}:{}", node.host, config.cluster.data_port_base + a.rank);
          a.local_endpoint = data_ipc_endpoint(config, a.rank);
        } else if (role == wire::Role::ROLLOUT) {
          a.endpoint =
              fmt::format("tcp://{}:{}", node.host, config.cluster.rollout_port_base + a.rank);
        }
        out.push_back(std::move(a));
      }
    }
  }
  const bool policy_stage = !config.job.stages.empty() && config.job.stages.front() == "policy";
  if (policy_stage) {
    // The policy learner sends its rollout batches to every rollout actor.
    for (Assignment& learner : out) {
      if (learner.role != wire::Role::LEARNER) continue;
      for (const Assignment& rollout : out)
        if (rollout.role == wire::Role::ROLLOUT) learner.peers.push_back(rollout.endpoint);
    }
  } else if (total_learners > 0) {
    for (Assignment& learner : out) {
      if (learner.role != wire::Role::LEARNER) continue;
      for (const Assignment& data : out) {
        if (data.role != wire::Role::DATA || data.rank % total_learners != learner.rank) continue;
        const bool same_node = data.node == learner.node && !data.local_endpoint.empty();
        learner.peers.push_back(same_node ? data.local_endpoint : data.endpoint);
      }
    }
  }
  return out;
}

void write_assignment(const Assignment& a, wire::ActorAssignment::Builder out) {
  out.setRole(a.role);
  out.setRank(a.rank);
  out.setLocalRank(a.local_rank);
  out.setEndpoint(a.endpoint);
  out.setLocalEndpoint(a.local_endpoint);
  auto peers = out.initPeers(static_cast<unsigned>(a.peers.size()));
  for (size_t i = 0; i < a.peers.size(); ++i) peers.set(static_cast<unsigned>(i), a.peers[i]);
  out.setThreads(a.threads);
  out.setDevice(a.device);
}

Assignment read_assignment(wire::ActorAssignment::Reader in, const std::string& node) {
  Assignment a;
  a.role = in.getRole();
  a.rank = in.getRank();
  a.local_rank = in.getLocalRank();
  a.node = node;
  a.endpoint = in.getEndpoint();
  a.local_endpoint = in.getLocalEndpoint();
  for (auto p : in.getPeers()) a.peers.emplace_back(p);
  a.threads = in.getThreads();
  a.device = in.getDevice();
  return a;
}

bool completes_job(const JobConfig& config, wire::Role role) {
  int64_t learners = 0;
  for (const NodeSpec& n : config.cluster.nodes) learners += n.learners;
  if (learners > 0) return role == wire::Role::LEARNER;
  return role == wire::Role::ROLLOUT || role == wire::Role::EVAL;
}

}  // namespace saccade::control
