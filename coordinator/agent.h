// `saccade agent`: one per node. Registers the node's resources with the
// coordinator, starts the actors it is told to start (each in its own process
// group, killed with the agent by PR_SET_PDEATHSIG), reaps them, reports how
// they ended, and kills hung ones when told. Restart policy is the
// coordinator's; the agent only executes it.
#pragma once

#include <string>

#include "common/config.h"

namespace saccade::coordinator {

inline constexpr int kExitCoordinatorLost = 4;  // no coordinator for cluster.reconnect_grace_s
inline constexpr int kExitRefused = 5;  // the coordinator refused this agent (job, node): see log

struct AgentOptions {
  std::string coordinator;   // HOST:PORT
  std::string node;          // a [[cluster.nodes]] name
  std::string actor_binary;  // executable run as `BINARY actor ...`; empty: this executable
  // Job id, [security] keys and message limit until the coordinator sends the
  // job's config (AssignRoles); the coordinator's config then applies.
  JobConfig bootstrap;
};

// Runs until the job ends (0), the agent is drained by SIGTERM (0), the
// coordinator refuses it (kExitRefused: another job's coordinator, or a node
// name not in its cluster.nodes), or the coordinator stays lost
// (kExitCoordinatorLost). Every actor is reaped first.
int run_agent(const AgentOptions& options);

}  // namespace saccade::coordinator
