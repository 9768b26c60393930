// Test harness for the runtime: background child processes with their own
// logs, free loopback ports, job configs, and a check that nothing a test
// started survives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace saccade::testing {

// A child process in its own process group, stdout+stderr to `log`. The
// destructor SIGKILLs its group and reaps it.
class Child {
 public:
  Child(std::vector<std::string> argv, std::filesystem::path log,
        std::vector<std::string> env = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Exit code once it ended (128 + signal when killed), nullopt while it runs.
  std::optional<int> poll();
  // Waits up to `timeout`; on timeout kills the group and returns nullopt.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);
  std::string log() const;  // what it wrote so far

 private:
  pid_t pid_ = -1;
  std::optional<int> code_;
  std::filesystem::path log_;
};

// The first of `count` consecutive TCP ports on 127.0.0.1, all free at the time of the
// call, drawn below the kernel's ephemeral range: outgoing connections (of this test or
// of tests running beside it) take their source ports from that range, so a port drawn
// there could be taken again before the job binds it.
int free_ports(int count);
inline int free_port() {
  return free_ports(1);
}

// Polls `done` every 20 ms until it holds or `timeout` (scaled by test_slowdown()) passes.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// Every process whose parent chain leads to this process (zombies included).
std::vector<pid_t> descendants();

// Makes orphans re-parent to the test process, so descendants() sees them.
void adopt_orphans();

// A TCP socket listening in a process.
struct Listener {
  pid_t pid = 0;
  std::string address;  // numeric: "127.0.0.1", "0.0.0.0" / "::" for every interface
  int port = 0;
  std::string command;  // the process's command line, arguments joined by spaces
  std::string describe() const;
};
// Every TCP socket (IPv4 and IPv6) that process `pid` listens on: the LISTEN
// rows of /proc/PID/net/tcp{,6} whose inode is one of /proc/PID/fd's sockets.
// Empty for a process that is gone.
std::vector<Listener> listening_sockets(pid_t pid);

using testing::TempDir;  // tests/support/temp_dir.h

// Shortest runtime config for tests: loopback, 50 ms heartbeats (the heartbeat, stall and
// drain timeouts scaled by test_slowdown(), tests/support/subprocess.h). `nodes` are
// [[cluster.nodes]] tables without the header; `extra` is appended as is.
struct TestJob {
  std::string name = "rt-test";
  std::vector<std::string> stages = {"pretrain"};  // job.stages
  int port = 0;
  int metrics_port = 0;
  int steps = 40;  // one epoch of `steps` steps
  // ssl.batch_size: the test bodies take no batches; a batch a learner could receive, as
  // saccade run refuses one over cluster.max_message_bytes (the default 1,024 would be).
  int batch_size = 16;
  // Channels, patches and views so small that a learner's batch of one image travels in
  // frames of 5 KB: for jobs that shrink cluster.max_message_bytes (to cut checkpoints into
  // many chunks); batch_size then sets how many images a learner's frame holds.
  bool small_frames = false;
  int checkpoint_every = 10;
  int max_restarts = 5;
  int status_linger_ms = 0;
  int heartbeat_misses = 6;  // of 50 ms heartbeats
  int stall_timeout_s = 1;
  int drain_timeout_s = 5;
  std::vector<std::string> nodes;
  std::string cluster_extra;  // more [cluster] keys
  std::string ssl_extra;      // more [ssl] keys
  std::string extra;          // more sections
};
std::string job_toml(const TestJob& job, const std::filesystem::path& work_dir);

// Bodies of the test actor (tests/coordinator/test_actor.cpp) take faults from
// this variable: "role[@stage]:rank:step:mode[:once];..." with mode crash | stall | stop | slow.
inline constexpr const char* kFaultVariable = "SACCADE_TEST_FAULT";

// A test rollout actor given this variable (a checkpoint step S) checks the
// stage's inputs it gets from the coordinator: the file kTestInputFile holds
// test_weights(1, kTestInputFileBytes) and the input checkpoint S has a
// "teacher" blob of test_weights(S, kTestTeacherBytes); a path outside the
// input folder and a missing step are refused. It exits 9 when anything differs.
inline constexpr const char* kInputStepVariable = "SACCADE_TEST_INPUT_STEP";
// ... whose checkpoint blob it checks: "teacher" (default) or "weights" (the
// test learner's own checkpoints, test_weights(S, SACCADE_TEST_CHECKPOINT_BYTES)).
inline constexpr const char* kInputBlobVariable = "SACCADE_TEST_INPUT_BLOB";
inline constexpr const char* kTestInputFile = "head.bin";
inline constexpr size_t kTestInputFileBytes = 5000;
inline constexpr size_t kTestTeacherBytes = 200000;

// The test learner checkpoints {"state": "step N", "weights": test_weights(N, bytes)}
// with `bytes` from this variable (default 3000); a learner that resumes checks both.
inline constexpr const char* kCheckpointBytesVariable = "SACCADE_TEST_CHECKPOINT_BYTES";
// Set: the test learner saves every checkpoint a second time, the same bytes.
inline constexpr const char* kRecommitVariable = "SACCADE_TEST_RECOMMIT";
inline std::string test_weights(int64_t step, size_t bytes) {
  std::string w(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) w[i] = static_cast<char>('a' + (i / 509 + step) % 26);
  return w;
}

}  // namespace saccade::testing
