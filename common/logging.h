// Process-wide logging: every line carries the process's role and rank, so
// logs gathered from a whole cluster can be merged and still read.
#pragma once

#include <string>

namespace saccade {

struct LogOptions {
  std::string role;   // coordinator, agent, data, learner, rollout, eval, cli, ...
  int rank = 0;       // rank within the role (0 for singletons)
  std::string level;  // trace | debug | info | warn | error | critical | off
  std::string dir;    // when set, also log to DIR/ROLE-RANK.log
};

// Installs the default spdlog logger. Throws std::invalid_argument naming the
// bad level, or std::runtime_error naming a log folder that cannot be created.
void init_logging(const LogOptions& options);

}  // namespace saccade
