#include "tests/coordinator/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/subprocess.h"

namespace saccade::testing {

Child::Child(std::vector<std::string> argv, std::filesystem::path log, std::vector<std::string> env)
    : log_(std::move(log)) {
  const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + log_.string());
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves nothing behind
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (std::string& e : env) putenv(e.data());
    execv(args[0], args.data());
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(fd);
}

Child::~Child() {
  if (!code_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

std::optional<int> Child::poll() {
  if (code_) return code_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return code_;
}

std::optional<int> Child::wait(std::chrono::milliseconds timeout) {
  if (wait_until([&] { return poll().has_value(); }, timeout)) return code_;
  ::kill(-pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  code_ = 128 + SIGKILL;
  return std::nullopt;
}

void Child::signal(int sig) {
  ::kill(pid_, sig);
}

std::string Child::log() const {
  std::ifstream in(log_);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

int ephemeral_low() {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  return low;
}

}  // namespace

int free_ports(int count) {
  static std::mt19937 rng(std::random_device{}());
  const int low = 10000, high = ephemeral_low() - count;
  if (high <= low) throw std::runtime_error("no port range below the ephemeral ports");
  // Ports handed out before are not free for this test either: nothing may bind
  // them yet (a job's coordinator port and store port drawn one after the other).
  static std::set<int> given;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = std::uniform_int_distribution<int>(low, high)(rng);
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = !given.count(p) && port_is_free(p);
    if (!all) continue;
    for (int p = base; p < base + count; ++p) given.insert(p);
    return base;
  }
  throw std::runtime_error(fmt::format("no {} consecutive free ports", count));
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> descendants() {
  std::map<pid_t, pid_t> parent;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid) parent[std::stoi(name)] = ppid;
  }
  std::vector<pid_t> out;
  const pid_t self = getpid();
  for (auto [pid, ppid] : parent) {
    for (pid_t p = ppid, hops = 0; p > 1 && hops < 64; ++hops) {
      if (p == self) {
        out.push_back(pid);
        break;
      }
      auto it = parent.find(p);
      if (it == parent.end()) break;
      p = it->second;
    }
  }
  return out;
}

std::string Listener::describe() const {
  return fmt::format("{}:{} of pid {} ({})", address, port, pid, command);
}

std::vector<Listener> listening_sockets(pid_t pid) {
  const std::string proc = fmt::format("/proc/{}", pid);
  std::set<std::string> inodes;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(it->path(), link_ec).string();
    if (!link_ec && target.rfind("socket:[", 0) == 0)
      inodes.insert(target.substr(8, target.size() - 9));
  }
  std::string command;
  {
    std::ifstream in(proc + "/cmdline");
    for (std::string arg; std::getline(in, arg, '\0');)
      command += (command.empty() ? "" : " ") + arg;
  }
  std::vector<Listener> out;
  for (const bool v6 : {false, true}) {
    std::ifstream table(proc + (v6 ? "/net/tcp6" : "/net/tcp"));
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode))
        continue;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: TCP_LISTEN
      const size_t colon = local.find(':');
      const std::string hex = local.substr(0, colon);
      // The kernel prints each 32-bit word of the address as a number in host order.
      char text[INET6_ADDRSTRLEN] = {};
      if (v6) {
        in6_addr a{};
        for (int w = 0; w < 4; ++w)
          a.s6_addr32[w] = static_cast<uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
        inet_ntop(AF_INET6, &a, text, sizeof text);
      } else {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        inet_ntop(AF_INET, &a, text, sizeof text);
      }
      out.push_back({pid, text, std::stoi(local.substr(colon + 1), nullptr, 16), command});
    }
  }
  return out;
}

void adopt_orphans() {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

std::string job_toml(const TestJob& job, const std::filesystem::path& work_dir) {
  std::string nodes;
  for (const std::string& n : job.nodes) nodes += "[[cluster.nodes]]\n" + n + "\n";
  return fmt::format(
      "[job]\nname = \"{}\"\nwork_dir = \"{}\"\nstages = [\"{}\"]\n\n"
      "[cluster]\ncoordinator_host = \"127.0.0.1\"\ncoordinator_port = {}\nmetrics_port = {}\n"
      "data_port_base = {}\n"
      "heartbeat_interval_ms = 50\nheartbeat_misses = {}\nmax_restarts = {}\n"
      "restart_backoff_ms = 50\nrestart_backoff_max_ms = 400\nreconnect_grace_s = 20\n"
      "stall_timeout_s = {}\ndrain_timeout_s = {}\nstatus_linger_ms = {}\n{}\n{}\n"
      "[ssl]\nepochs = 1\nsteps_per_epoch = {}\ncheckpoint_every_steps = {}\nbatch_size = {}\n{}\n"
      "[logging]\nlevel = \"info\"\n{}\n",
      job.name, work_dir.string(), fmt::join(job.stages, "\", \""), job.port, job.metrics_port,
      free_ports(16), job.heartbeat_misses * test_slowdown(), job.max_restarts,
      job.stall_timeout_s * test_slowdown(), job.drain_timeout_s * test_slowdown(),
      job.status_linger_ms, job.cluster_extra, nodes, job.steps, job.checkpoint_every,
      job.batch_size, job.ssl_extra,
      (job.small_frames ? "[data]\nchannels = 1\npixel_mean = [0.5]\npixel_std = [0.25]\n"
                          "[model]\npatch_size = 2\n"
                          "[views]\nmultizoom_patches = 2\nfovea_grid = 2\nglimpses = 2\n"
                          "global_grid = 3\nlocal_grid = 2\nlocal_views = 1\n"
                        : std::string()) +
          job.extra);
}

}  // namespace saccade::testing
