// Where every actor of a job stage runs: roles placed on nodes by the counts
// of [[cluster.nodes]], global ranks numbered in node order. Only the actors
// of the stage running now exist; the next stage is placed when it begins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "schemas/wire.h"

namespace saccade::control {

struct Assignment {
  wire::Role role = wire::Role::UNKNOWN;
  int32_t rank = 0;        // global rank within the role
  int32_t local_rank = 0;  // rank within the role on its node
  std::string node;
  std::string endpoint;            // where the actor binds (data actors: batch socket)
  std::string local_endpoint;      // ipc:// endpoint it also binds, for peers on its node
  std::vector<std::string> peers;  // endpoints it connects to (a learner: its data actors)
  uint32_t threads = 0;            // 0: the agent divides the node's cores
  std::string device;              // "cpu" or "cuda:N"
  std::string stage;               // the stage it runs: picks its body
};

// Every actor of stage `stage` of the job, in node order then role order:
//  - pretrain: data actors and learners. Data actor d feeds learner
//    d % learners: over ipc:// when both are on one node (cluster.ipc_dir),
//    else over tcp://.
//  - probe: learner 0 alone (the probe runs in its slot).
//  - policy: learner 0 (the policy learner) and every rollout actor; rollout
//    actor r binds tcp://<host>:<rollout_port_base + r> and learner 0 connects
//    to all of them.
//  - eval: learner 0 (the eval leader) and every eval actor, placed and
//    connected as the policy stage's rollout actors (the same port range).
std::vector<Assignment> place_actors(const JobConfig& config, const std::string& stage);

// The ipc:// endpoint of data actor `rank` under cluster.ipc_dir, unique per job
// and coordinator port; "" when ipc_dir is empty or the path would not fit a
// Unix socket address (then peers on the node use TCP).
std::string data_ipc_endpoint(const JobConfig& config, int32_t rank);

void write_assignment(const Assignment& a, wire::ActorAssignment::Builder out);
Assignment read_assignment(wire::ActorAssignment::Reader in, const std::string& node);

// Whether actors of `role` finish stage `stage` by exiting cleanly (the
// learners of every stage); the others serve them and are
// shut down once the stage's work is done.
bool completes_stage(const std::string& stage, wire::Role role);

// The exit code of an actor that cannot run its stage with the inputs it was
// given (e.g. a probe head without the ViT-mode head the eval stage needs):
// restarting it would fail the same way, so the coordinator fails the job
// with the actor's reason instead (sysexits' EX_CONFIG).
inline constexpr int kExitInputRefused = 78;

}  // namespace saccade::control
