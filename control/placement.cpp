#include "control/placement.h"

#include <fmt/format.h>

#include <algorithm>
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

std::vector<Assignment> place_actors(const JobConfig& config, const std::string& stage) {
  const int64_t total_learners = config.cluster.total(&NodeSpec::learners);
  const bool pretrain = stage == "pretrain", policy = stage == "policy", eval = stage == "eval";
  std::vector<Assignment> out;
  std::map<wire::Role, int32_t> next_rank;
  for (const NodeSpec& node : config.cluster.nodes) {
    // Learner 0 alone runs the probe and the policy learner.
    int64_t learners = node.learners;
    if (!pretrain)
      learners = next_rank[wire::Role::LEARNER] == 0 ? std::min<int64_t>(learners, 1) : 0;
    const std::pair<wire::Role, int64_t> counts[] = {
        {wire::Role::DATA, pretrain ? node.data_actors : 0},
        {wire::Role::LEARNER, learners},
        {wire::Role::ROLLOUT, policy ? node.rollout_actors : 0},
        {wire::Role::EVAL, eval ? node.eval_actors : 0}};
    for (auto [role, count] : counts) {
      for (int64_t local = 0; local < count; ++local) {
        Assignment a;
        a.role = role;
        a.rank = next_rank[role]++;
        a.local_rank = static_cast<int32_t>(local);
        a.node = node.name;
        a.threads = static_cast<uint32_t>(node.threads);
        a.stage = stage;
        const bool gpu = node.gpus > 0 && role != wire::Role::DATA;
        a.device = gpu ? fmt::format("cuda:{}", local % node.gpus) : "cpu";
        if (role == wire::Role::DATA) {
          a.endpoint =
              fmt::format("tcp://{}:{}", node.host, config.cluster.data_port_base + a.rank);
          a.local_endpoint = data_ipc_endpoint(config, a.rank);
        } else if (role == wire::Role::ROLLOUT || role == wire::Role::EVAL) {
          // The policy and eval stages never run at once: their actors share the range.
          a.endpoint =
              fmt::format("tcp://{}:{}", node.host, config.cluster.rollout_port_base + a.rank);
        }
        out.push_back(std::move(a));
      }
    }
  }
  for (Assignment& learner : out) {
    if (learner.role != wire::Role::LEARNER) continue;
    for (const Assignment& peer : out) {
      if ((policy && peer.role == wire::Role::ROLLOUT) || (eval && peer.role == wire::Role::EVAL))
        learner.peers.push_back(peer.endpoint);
      if (pretrain && peer.role == wire::Role::DATA && peer.rank % total_learners == learner.rank) {
        const bool same_node = peer.node == learner.node && !peer.local_endpoint.empty();
        learner.peers.push_back(same_node ? peer.local_endpoint : peer.endpoint);
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
  out.setStage(a.stage);
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
  a.stage = in.getStage();
  return a;
}

bool completes_stage(const std::string& /*stage*/, wire::Role role) {
  return role == wire::Role::LEARNER;
}

}  // namespace saccade::control
