// Runs real child processes from tests, and always reaps them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace saccade::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that ended it, 0 if it exited
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] with its arguments, collects stdout and stderr, and waits for
// it. Past `timeout` the child's whole process group is killed and reaped.
ProcessResult run_process(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace saccade::testing
