// `saccade run CONFIG`: the embedded default. The coordinator and one agent
// per configured node run as child processes on loopback, through the same
// code paths as a cluster.
#pragma once

#include <string>

namespace saccade::coordinator {

struct LocalRunOptions {
  std::string config_file;
  std::string actor_binary;  // empty: this executable
  std::string log_level;     // passed on to the children when set
  bool fresh = false;        // the coordinator starts the job over (--fresh)
};

// Returns the coordinator's exit code (kExitJobFinished 0, kExitJobDrained 4,
// kExitJobFailed 3; 1 when the coordinator died). SIGTERM/SIGINT drain the job; every child is
// reaped.
int run_local(const LocalRunOptions& options);

}  // namespace saccade::coordinator
