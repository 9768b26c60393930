// A job's config resolved against the allocation it runs in, so that one
// config runs unchanged on 1, 2 or 4 Slurm nodes (cluster.nodes_from) and two
// jobs on one node never share a port (cluster.ports_per_job), as torchrun's
// rendezvous endpoint and Lightning's SLURMEnvironment derive them from Slurm.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace saccade {

// What the launcher knows about its allocation.
struct Allocation {
  std::string nodelist;  // $SLURM_JOB_NODELIST: Slurm's compact host list ("n[01-03],gpu7")
  std::string job_id;    // $SLURM_JOB_ID
  // Nodes whose network address is not their name (Slurm's NodeAddr), from
  // $SACCADE_NODE_ADDRS = "name=addr,...", which scripts/slurm/saccade.sbatch
  // sets from `scontrol show node`.
  std::map<std::string, std::string> addresses{};
  // Throws ConfigError naming $SACCADE_NODE_ADDRS when it is malformed.
  static Allocation from_environment();
};

// Expands a Slurm host list ("n[01-03,7],gpu-a" -> n01 n02 n03 n07 gpu-a), keeping
// zero padding. Throws ConfigError naming the list when it is malformed.
std::vector<std::string> expand_hostlist(std::string_view list);

// `config` with its nodes and ports for `allocation`:
// - nodes_from = "slurm": one node per allocated host, each a copy of the one
//   [[cluster.nodes]] entry (the template) named by the host and addressed by
//   its entry in `addresses`, else by its name; coordinator_host = the first
//   node's address;
// - ports_per_job > 0 and a job id: every port of [cluster] moves up by
//   (job id mod 100) * ports_per_job.
// The result is validated again (ports, roles). Throws ConfigError naming the
// key when the config asks for an allocation that is not there.
JobConfig resolve_allocation(const JobConfig& config, const Allocation& allocation);

}  // namespace saccade
