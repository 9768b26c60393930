#include "coordinator/local_run.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <map>

#include "common/allocation.h"
#include "common/config.h"
#include "control/control.h"
#include "control/process.h"

namespace saccade::coordinator {

int run_local(const LocalRunOptions& o) {
  const JobConfig config =
      resolve_allocation(load_config(o.config_file), Allocation::from_environment());
  control::SignalFd signals({SIGCHLD, SIGTERM, SIGINT});
  control::become_subreaper();
  const std::string self = control::self_executable();
  std::vector<std::string> prefix = {self};
  if (!o.log_level.empty()) prefix.insert(prefix.end(), {"--log-level", o.log_level});
  std::map<pid_t, std::string> children;  // pid -> what it is
  auto start = [&](std::vector<std::string> args, const std::string& what) {
    args.insert(args.begin(), prefix.begin(), prefix.end());
    control::Spawned s = control::spawn_process(args);
    if (!s.error.empty()) throw std::runtime_error(what + ": " + s.error);
    children[s.pid] = what;
    return s.pid;
  };
  // One launch identity for the coordinator and agents (and so the actors) of this run.
  const std::string launch = control::resolve_launch("", true);
  std::vector<std::string> coordinator_args = {"coordinator", o.config_file, "--bind",
                                               "127.0.0.1",   "--launch",    launch};
  if (o.fresh) coordinator_args.push_back("--fresh");
  const pid_t coordinator = start(coordinator_args, "coordinator");
  const std::string address = fmt::format("127.0.0.1:{}", config.cluster.coordinator_port);
  for (const NodeSpec& node : config.cluster.nodes) {
    std::vector<std::string> args = {"agent",    "--coordinator", address,    "--node", node.name,
                                     "--config", o.config_file,   "--launch", launch};
    if (!o.actor_binary.empty()) args.insert(args.end(), {"--actor-binary", o.actor_binary});
    start(args, "agent " + node.name);
  }
  int result = -1;
  int64_t give_up_ms = -1;  // after the coordinator ended, agents get the drain timeout
  int signals_seen = 0;
  while (!children.empty()) {
    pollfd p{signals.fd(), POLLIN, 0};
    poll(&p, 1, 100);
    for (int s; (s = signals.take()) != 0;) {
      if (s == SIGCHLD) continue;
      // The coordinator drains the job; its Shutdown stops the agents.
      ++signals_seen;
      spdlog::info("{}: {} the job", strsignal(s), signals_seen == 1 ? "draining" : "ending");
      if (result < 0) ::kill(coordinator, SIGTERM);
      if (signals_seen > 1) {
        for (auto& [pid, what] : children) ::kill(-pid, SIGTERM);
      }
    }
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = children.find(pid);
      if (it == children.end()) continue;  // an orphan re-parented to us
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      if (pid == coordinator) {
        result = code;
        give_up_ms = control::steady_ms() + (config.cluster.drain_timeout_s + 5) * 1000;
      }
      spdlog::debug("{} ended with {}", it->second, code);
      children.erase(it);
    }
    if (give_up_ms >= 0 && control::steady_ms() > give_up_ms) {
      for (auto& [pid, what] : children) {
        spdlog::warn("{} still runs after the job ended: killing it", what);
        ::kill(-pid, SIGKILL);
      }
      give_up_ms = control::steady_ms() + 1000;
    }
  }
  return result < 0 ? 1 : result;
}

}  // namespace saccade::coordinator
