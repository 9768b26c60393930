#include "control/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace saccade::control {

Spawned spawn_process(const std::vector<std::string>& argv) {
  Spawned out;
  if (argv.empty()) {
    out.error = "spawn: empty command line";
    return out;
  }
  int status_pipe[2];  // carries errno when exec fails; closed by a successful exec
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    out.error = std::string("fork: ") + std::strerror(errno);
    close(status_pipe[0]);
    close(status_pipe[1]);
    return out;
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    close(status_pipe[0]);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGTERM, SIGINT, SIGCHLD, SIGPIPE, SIGHUP}) signal(s, SIG_DFL);
    execv(args[0], args.data());
    const int e = errno;
    (void)!write(status_pipe[1], &e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent: no window where a kill(-pid) misses
  close(status_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(status_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  out.pid = pid;
  if (n == sizeof child_errno) {
    out.error = "cannot execute " + argv[0] + ": " + std::strerror(child_errno);
  }
  return out;
}

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot resolve /proc/self/exe: " + ec.message());
  return path.string();
}

namespace {
int g_signal_pipe = -1;  // write end; one process-wide pipe serves every SignalFd

extern "C" void write_signal(int signo) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(signo);
  (void)!write(g_signal_pipe, &b, 1);
  errno = saved;
}
}  // namespace

SignalFd::SignalFd(std::initializer_list<int> signals) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  fd_ = fds[0];
  write_fd_ = fds[1];
  g_signal_pipe = write_fd_;
  struct sigaction action {};
  action.sa_handler = write_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int s : signals) sigaction(s, &action, nullptr);
}

SignalFd::~SignalFd() {
  if (fd_ >= 0) close(fd_);
  // The write end stays open: a late signal must not hit a closed (or reused) descriptor.
}

int SignalFd::take() {
  unsigned char b = 0;
  return read(fd_, &b, 1) == 1 ? b : 0;
}

void become_subreaper() {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

}  // namespace saccade::control
