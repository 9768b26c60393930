// Child processes that cannot outlive their parent, and signals as file
// descriptors for poll loops. Used by the node agent (actors) and by
// `saccade run` (coordinator and agents).
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace saccade::control {

struct Spawned {
  pid_t pid = -1;     // -1: nothing runs; `error` says why
  std::string error;  // e.g. "cannot execute /x/saccade: No such file or directory"
};

// Forks and executes argv[0] (a path) in a process group of its own, with
// PR_SET_PDEATHSIG(SIGKILL) so that it dies with the calling thread, signals
// unblocked and default. Exec failures are reported here, not as exit 127.
// The caller reaps the child (waitpid) when it ends.
Spawned spawn_process(const std::vector<std::string>& argv);

// Path of the running executable (/proc/self/exe resolved).
std::string self_executable();

// Delivers `signals` through a pipe that poll loops can watch (a self-pipe:
// an async-signal-safe handler writes the signal number). Works whatever
// threads libraries have started, unlike signal masks + signalfd. One per process.
class SignalFd {
 public:
  explicit SignalFd(std::initializer_list<int> signals);
  ~SignalFd();
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;
  int fd() const { return fd_; }
  // The next pending signal, or 0 when none.
  int take();

 private:
  int fd_ = -1;        // owned: read end
  int write_fd_ = -1;  // written by the handler
};

// Makes orphaned descendants of this process re-parent to it (so it can reap
// them) instead of to init.
void become_subreaper();

}  // namespace saccade::control
