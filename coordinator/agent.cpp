#include "coordinator/agent.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "control/control.h"
#include "control/placement.h"
#include "control/process.h"

namespace saccade::coordinator {
namespace {

using Body = wire::Envelope::Body;
using ActorKey = std::pair<wire::Role, int32_t>;

uint32_t count_gpus() {
  uint32_t n = 0;
  std::error_code ec;
  const std::regex nvidia("nvidia[0-9]+");
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec))
    n += std::regex_match(e.path().filename().string(), nvidia);
  return n;
}

struct Child {
  control::Assignment assignment;
  pid_t pid = -1;
  bool killed = false;
};

// How an actor of this node ended, kept until it is started again: an exit
// reported while the coordinator was down is said again when registering.
struct Ended {
  uint32_t pid = 0;
  wire::ActorState state = wire::ActorState::EXITED;
  int code = 0;
  int signal = 0;
  std::string reason;
};

class Agent {
 public:
  explicit Agent(const AgentOptions& o)
      : options_(o),
        config_(o.bootstrap),
        // SIGHUP: an agent started over `ssh -tt` gets it when its session ends.
        signals_({SIGCHLD, SIGTERM, SIGINT, SIGHUP}),
        security_(control::load_security(o.bootstrap.security, false)),
        endpoint_(control::tcp_endpoint(o.coordinator, "--coordinator")),
        socket_(context_, zmq::socket_type::dealer),
        writer_({o.bootstrap.job.name, wire::Role::AGENT, 0, o.node}),
        binary_(o.actor_binary.empty() ? control::self_executable() : o.actor_binary),
        config_file_(std::filesystem::path(o.bootstrap.job.work_dir) / "agents" /
                     (o.node + ".toml")) {
    // The config this node's actors run, beside the job's other files: one per node,
    // replaced by the next launch, never left loose in /tmp after a SIGKILL.
    std::error_code ec;
    std::filesystem::create_directories(config_file_.parent_path(), ec);
    if (ec)
      throw std::runtime_error(fmt::format("job.work_dir: cannot create {}: {}",
                                           config_file_.parent_path().string(), ec.message()));
    control::become_subreaper();  // orphans of actors come back to us to be reaped
    connect();
    spdlog::info("agent of node {} -> {} (actors: {})", o.node, endpoint_, binary_);
  }

  ~Agent() {
    kill_all(SIGKILL);
    while (!children_.empty()) reap(true);
  }

  int run() {
    last_coordinator_ms_ = control::steady_ms();
    int64_t next_tick = 0;
    for (;;) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, signals_.fd(), ZMQ_POLLIN, 0}};
      control::poll_interruptible(
          items, 2,
          std::chrono::milliseconds(std::clamp<int64_t>(next_tick - control::steady_ms(), 0, 50)));
      if (items[1].revents & ZMQ_POLLIN) {
        for (int s; (s = signals_.take()) != 0;) on_signal(s);
      }
      if (items[0].revents & ZMQ_POLLIN) receive_all();
      const int64_t now = control::steady_ms();
      if (now >= next_tick) {
        next_tick = now + config_.cluster.heartbeat_interval_ms;
        if (const int code = tick(now); code >= 0) return code;
      }
    }
  }

 private:
  // A fresh socket: ZeroMQ gives up on a connection after a protocol error
  // (e.g. a corrupt frame), so a silent coordinator is re-dialled from scratch.
  // No maxmsgsize here for the same reason: wire::open_frame refuses big frames.
  void connect() {
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    control::configure_client(socket_, security_, control::agent_identity(options_.node));
    socket_.connect(endpoint_);
    connected_ms_ = control::steady_ms();
  }

  int64_t timeout_ms() const {
    return config_.cluster.heartbeat_interval_ms * config_.cluster.heartbeat_misses;
  }

  int tick(int64_t now) {
    reap(false);  // also here: signals of several children may arrive as one
    if (stopping_) {
      if (children_.empty()) {
        if (refused_) return kExitRefused;
        report_agent(wire::ActorState::EXITED, "all actors ended");
        return 0;
      }
      // Actors were told by the coordinator; SIGTERM the slow ones halfway, SIGKILL at the end.
      if (!term_sent_ && now > stop_deadline_ms_ - config_.cluster.drain_timeout_s * 500) {
        kill_all(SIGTERM);
        term_sent_ = true;
      }
      if (now > stop_deadline_ms_) kill_all(SIGKILL);
      return -1;
    }
    const int64_t silent = now - last_coordinator_ms_;
    if (silent > timeout_ms() && registered_) {
      spdlog::warn("coordinator lost: nothing for {} ms; actors keep running, waiting up to {} s",
                   silent, config_.cluster.reconnect_grace_s);
      registered_ = false;
    }
    if (silent > timeout_ms() && now - connected_ms_ > timeout_ms()) connect();
    if (silent > config_.cluster.reconnect_grace_s * 1000) {
      spdlog::error("coordinator gone for {} s: stopping every actor", silent / 1000);
      kill_all(SIGKILL);
      while (!children_.empty()) reap(true);
      return kExitCoordinatorLost;
    }
    if (registered_) {
      send([&](wire::Envelope::Builder e) {
        auto hb = e.getBody().initHeartbeat();
        hb.setState(wire::ActorState::RUNNING);
        hb.setStep(static_cast<int64_t>(children_.size()));
      });
    } else {
      send_registration();
    }
    return -1;
  }

  void send_registration() {
    send([&](wire::Envelope::Builder e) {
      auto r = e.getBody().initRegisterNode();
      r.setNodeName(options_.node);
      r.setHost(config_.cluster.coordinator_host);
      r.setCores(std::thread::hardware_concurrency());
      r.setGpus(count_gpus());
      r.setMemoryBytes(static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                       static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
      auto list = r.initActors(static_cast<unsigned>(children_.size() + ended_.size()));
      unsigned i = 0;
      for (const auto& [k, c] : children_) {
        auto ev = list[i++];
        ev.setRole(k.first);
        ev.setRank(k.second);
        ev.setPid(static_cast<uint32_t>(c.pid));
        ev.setState(wire::ActorState::RUNNING);
      }
      for (const auto& [k, e] : ended_) {
        auto ev = list[i++];
        ev.setRole(k.first);
        ev.setRank(k.second);
        ev.setPid(e.pid);
        ev.setState(e.state);
        ev.setExitCode(e.code);
        ev.setSignal(e.signal);
        ev.setReason(e.reason);
      }
    });
  }

  void receive_all() {
    const wire::Expect expect = control::expect_for(config_);
    for (int i = 0; i < 1000; ++i) {
      wire::Received r = wire::recv_message(socket_, expect, zmq::recv_flags::dontwait);
      if (r.status == wire::RecvStatus::kNothing) return;
      if (r.status == wire::RecvStatus::kRefused) {
        drops_.refused("coordinator", r.why);
        continue;
      }
      if (r.message->envelope().getSender().getRole() != wire::Role::COORDINATOR) {
        drops_.refused("coordinator", "a message not from the coordinator");
        continue;
      }
      last_coordinator_ms_ = control::steady_ms();
      handle(*r.message);
    }
  }

  void handle(const wire::Message& m) {
    const auto body = m.envelope().getBody();
    switch (m.kind()) {
      case Body::HEARTBEAT:
        return;
      case Body::ACK:
        if (!body.getAck().getOk()) send_registration();
        return;
      case Body::ASSIGN_ROLES:
        return on_assign(body.getAssignRoles());
      case Body::ACTOR_COMMAND:
        return on_command(body.getActorCommand());
      case Body::REFUSAL:
        spdlog::error("the coordinator at {} refused node \"{}\": {}", options_.coordinator,
                      options_.node, body.getRefusal().getReason().cStr());
        refused_ = true;
        if (!stopping_) stop(true);
        return;
      case Body::SHUTDOWN:
        if (!stopping_) {
          spdlog::info("shutdown: {}", body.getShutdown().getReason().cStr());
          stop(false);
        }
        return;
      default:
        drops_.refused("coordinator", fmt::format("unexpected {}", wire::kind_name(m.kind())));
    }
  }

  void on_assign(wire::AssignRoles::Reader a) {
    JobConfig job;
    try {
      job = parse_config(a.getConfigToml().cStr(), "<config from the coordinator>");
    } catch (const ConfigError& e) {
      drops_.refused("coordinator", std::string("AssignRoles with a refused config: ") + e.what());
      return;
    }
    if (job.job.name != config_.job.name || a.getNodeName() != options_.node.c_str()) {
      drops_.refused("coordinator", "AssignRoles for another job or node");
      return;
    }
    job.security = options_.bootstrap.security;  // key paths are this node's
    config_ = job;
    std::ofstream out(config_file_, std::ios::trunc);
    out << a.getConfigToml().cStr();
    if (!out.flush())
      spdlog::error("cannot write {}: the actors will not start", config_file_.string());
    registered_ = true;
    spdlog::info("registered: {} actors placed on this node", a.getActors().size());
  }

  void on_command(wire::ActorCommand::Reader cmd) {
    const control::Assignment a = control::read_assignment(cmd.getAssignment(), options_.node);
    const ActorKey key{a.role, a.rank};
    auto it = children_.find(key);
    if (cmd.getAction() == wire::ActorCommand::Action::KILL) {
      if (it != children_.end()) {
        spdlog::warn("killing {} {} (pid {}): {}", control::role_name(a.role), a.rank,
                     it->second.pid, cmd.getReason().cStr());
        ::kill(-it->second.pid, SIGKILL);
        it->second.killed = true;
      }
      return;
    }
    if (!registered_ || stopping_) return;
    if (it != children_.end()) {  // already runs: say so again
      report(key, it->second.pid, wire::ActorState::STARTING, 0, 0, "");
      return;
    }
    uint32_t threads = a.threads;
    if (threads == 0) {  // the node's cores, divided among its actors of this stage
      size_t here = 0;
      for (const control::Assignment& other : control::place_actors(config_, a.stage))
        here += other.node == options_.node ? 1 : 0;
      threads = std::max<uint32_t>(1, std::thread::hardware_concurrency() /
                                          static_cast<uint32_t>(std::max<size_t>(here, 1)));
    }
    std::vector<std::string> argv = {binary_,         "actor",
                                     "--role",        control::role_name(a.role),
                                     "--rank",        std::to_string(a.rank),
                                     "--local-rank",  std::to_string(a.local_rank),
                                     "--node",        options_.node,
                                     "--coordinator", options_.coordinator,
                                     "--config",      config_file_.string(),
                                     "--threads",     std::to_string(threads),
                                     "--device",      a.device,
                                     "--stage",       a.stage,
                                     "--restarts",    std::to_string(cmd.getRestarts())};
    if (!a.endpoint.empty()) argv.insert(argv.end(), {"--endpoint", a.endpoint});
    if (!a.local_endpoint.empty()) argv.insert(argv.end(), {"--local-endpoint", a.local_endpoint});
    for (const std::string& p : a.peers) argv.insert(argv.end(), {"--peer", p});
    control::Spawned s = control::spawn_process(argv);
    if (s.pid > 0 && s.error.empty()) {
      children_[key] = {a, s.pid, false};
      ended_.erase(key);
      spdlog::info("started {} {} (pid {}, restart {}){}", control::role_name(a.role), a.rank,
                   s.pid, cmd.getRestarts(), a.endpoint.empty() ? "" : " at " + a.endpoint);
      report(key, static_cast<uint32_t>(s.pid), wire::ActorState::STARTING, 0, 0, "");
      return;
    }
    if (s.pid > 0) waitpid(s.pid, nullptr, 0);  // exec failed: reap it now
    spdlog::error("{} {}: {}", control::role_name(a.role), a.rank, s.error);
    report(key, s.pid > 0 ? static_cast<uint32_t>(s.pid) : 0, wire::ActorState::FAILED, 127, 0,
           s.error);
  }

  void on_signal(int s) {
    if (s == SIGCHLD) {
      reap(false);
      return;
    }
    if (!stopping_) {
      spdlog::warn("{}: draining this node's actors", strsignal(s));
      report_agent(wire::ActorState::DRAINING, std::string("received ") + strsignal(s));
      stop(true);
    } else {
      spdlog::warn("second {}: killing every actor", strsignal(s));
      kill_all(SIGKILL);
    }
  }

  void stop(bool signal_actors) {
    stopping_ = true;
    stop_deadline_ms_ = control::steady_ms() + config_.cluster.drain_timeout_s * 1000;
    if (signal_actors) {
      kill_all(SIGTERM);
      term_sent_ = true;
    }
  }

  void reap(bool block) {
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
      if (pid <= 0) {
        if (block && errno == ECHILD) children_.clear();  // nothing left to wait for
        return;
      }
      for (auto it = children_.begin(); it != children_.end(); ++it) {
        if (it->second.pid != pid) continue;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        const bool ok = code == 0 && sig == 0;
        spdlog::log(ok ? spdlog::level::info : spdlog::level::warn, "{} {} (pid {}) ended: {}",
                    control::role_name(it->first.first), it->first.second, pid,
                    sig ? fmt::format("signal {}", sig) : fmt::format("exit code {}", code));
        const Ended e{static_cast<uint32_t>(pid),
                      ok ? wire::ActorState::EXITED : wire::ActorState::FAILED, code, sig,
                      it->second.killed ? "killed by its agent" : ""};
        report(it->first, e.pid, e.state, e.code, e.signal, e.reason);
        ended_[it->first] = e;
        ::kill(-pid, SIGKILL);  // whatever it left in its group goes with it
        children_.erase(it);
        break;
      }
      if (block) return;
    }
  }

  void kill_all(int signal) {
    for (auto& [k, c] : children_) ::kill(-c.pid, signal);
  }

  void report(const ActorKey& key, uint32_t pid, wire::ActorState state, int code, int sig,
              const std::string& reason) {
    send([&](wire::Envelope::Builder e) {
      auto ev = e.getBody().initActorEvent();
      ev.setRole(key.first);
      ev.setRank(key.second);
      ev.setPid(pid);
      ev.setState(state);
      ev.setExitCode(code);
      ev.setSignal(sig);
      ev.setReason(reason);
    });
  }

  void report_agent(wire::ActorState state, const std::string& reason) {
    report({wire::Role::AGENT, 0}, static_cast<uint32_t>(getpid()), state, 0, 0, reason);
  }

  void send(const std::function<void(wire::Envelope::Builder)>& fill) {
    try {
      socket_.send(writer_.make(0, fill), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::debug("send failed: {}", e.what());
    }
  }

  const AgentOptions& options_;
  JobConfig config_;
  control::SignalFd signals_;
  control::Security security_;
  std::string endpoint_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  control::EnvelopeWriter writer_;
  std::string binary_;
  std::filesystem::path config_file_;  // the job's config, written for the actors
  std::map<ActorKey, Child> children_;
  std::map<ActorKey, Ended> ended_;  // actors of this node not running now
  control::DropLog drops_;
  bool registered_ = false;
  bool stopping_ = false;
  bool refused_ = false;  // the coordinator refused this agent: exit kExitRefused
  bool term_sent_ = false;
  int64_t stop_deadline_ms_ = 0;
  int64_t last_coordinator_ms_ = 0;
  int64_t connected_ms_ = 0;
};

}  // namespace

int run_agent(const AgentOptions& options) {
  Agent agent(options);
  return agent.run();
}

}  // namespace saccade::coordinator
