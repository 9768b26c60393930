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

// How many times slower than usual the processes under test run: SACCADE_TEST_SLOWDOWN, a
// whole factor (1 when unset), which scripts/check_sanitizers.sh sets where a sanitizer
// slows every process down. Waits for processes (run_process, the runtime harness's waits)
// and the heartbeat, stall and drain timeouts of the runtime's test jobs scale by it.
int test_slowdown();
inline std::chrono::milliseconds scaled(std::chrono::milliseconds d) {
  return d * test_slowdown();
}

// Runs argv[0] with its arguments, collects stdout and stderr, and waits for
// it. Past `timeout` (scaled by test_slowdown()) the child's whole process group is killed
// and reaped.
ProcessResult run_process(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace saccade::testing
