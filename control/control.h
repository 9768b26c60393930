// The control plane's shared pieces: endpoints, role names, CURVE keys and
// socket set-up, numbered envelopes and rate-limited drop logs. Used by the
// coordinator, the node agent, status clients and the actor runtime, so that
// each of these is done one way. No torch: this code moves bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/config.h"
#include "schemas/wire.h"

namespace saccade::control {

// Monotonic milliseconds, for timeouts and ages.
int64_t steady_ms();

// zmq::poll that treats a signal's interruption (EINTR) as "nothing ready":
// every runtime process takes signals through handlers.
void poll_interruptible(zmq::pollitem_t* items, size_t n, std::chrono::milliseconds timeout);

// "HOST:PORT" -> "tcp://HOST:PORT". Throws std::invalid_argument naming `what`.
std::string tcp_endpoint(const std::string& host_port, const std::string& what);

// "data", "learner", "rollout", "eval" (and the other wire roles) <-> wire::Role.
const char* role_name(wire::Role role);
// Throws std::invalid_argument naming the role and what was expected.
wire::Role role_from_name(const std::string& name);
const char* state_name(wire::ActorState state);

// Routing identities on the coordinator's ROUTER: fixed per peer, so a
// restarted coordinator can address the agents and actors of its job.
std::string agent_identity(const std::string& node);
std::string actor_identity(wire::Role role, int32_t rank);

// A CURVE key pair, Z85-encoded (40 characters each).
struct CurveKeys {
  std::string public_key;
  std::string secret_key;  // empty when only the public half was read
};

CurveKeys generate_curve_keys();
// Writes DIR/server.key, DIR/server.pub, DIR/client.key, DIR/client.pub
// (secret files mode 0600). Throws std::runtime_error naming the file.
void write_key_files(const std::filesystem::path& dir);
// Reads a key file written by write_key_files; throws std::runtime_error
// naming the file and what is missing.
CurveKeys read_key_file(const std::filesystem::path& file, bool need_secret);

// CURVE settings of one process, read from the config's [security] files.
struct Security {
  bool curve = false;
  std::string server_public;
  std::string server_secret;  // coordinator only
  CurveKeys client;           // the job's shared client pair
};
Security load_security(const SecurityConfig& config, bool as_server);

// Client side (DEALER): CURVE client keys when on; linger, immediate, reconnect.
void configure_client(zmq::socket_t& socket, const Security& security, const std::string& identity);
// Server side (ROUTER): CURVE server with ZAP domain "saccade" when on.
void configure_server(zmq::socket_t& socket, const Security& security);

// Binds a server socket to `endpoint` and returns the bound endpoint (a
// wildcard port resolved). A TCP host name (a node's name) is resolved to its
// address first: ZeroMQ binds only addresses and interfaces, and nothing
// listens on every interface unless the endpoint says `*`. Throws
// std::runtime_error naming the endpoint and why (a port another job holds).
std::string bind_router(zmq::socket_t& router, const std::string& endpoint);

// The network interface (e.g. "eth0", "lo") that holds the IPv4 address `host`
// resolves to: where a library that binds by interface (NCCL) must listen so
// that it listens only on the node's configured address. "" when the host does
// not resolve or no local interface holds its address.
std::string interface_of(const std::string& host);

// A ROUTER's routing id (binary bytes) as text for logs.
std::string peer_name(const zmq::message_t& identity);

// One [routing id, frame] message taken from a ROUTER, its frame validated.
struct RoutedFrame {
  zmq::message_t identity;
  std::string from;         // peer_name(identity)
  wire::Received received;  // status kRefused with `why` for a bad frame or a multi-part message
};
// Takes one message without blocking; nullopt when none was waiting.
std::optional<RoutedFrame> recv_routed(zmq::socket_t& router, const wire::Expect& expect);

// ZAP handler (RFC 27) for the coordinator: admits CURVE clients whose public
// key is the job's client key. Bind its socket before any CURVE socket binds.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, const std::string& allowed_client_public);
  zmq::socket_t& socket() { return socket_; }
  void handle_one();  // call when socket() is readable
  uint64_t refused() const { return refused_; }

 private:
  zmq::socket_t socket_;  // REP on inproc://zeromq.zap.01
  std::string allowed_;   // 32 raw bytes
  uint64_t refused_ = 0;
};

// Builds this process's envelopes: job id, sender and a sequence number.
class EnvelopeWriter {
 public:
  explicit EnvelopeWriter(wire::SenderInfo from) : from_(std::move(from)) {}
  // `fill` sets the body on the started envelope.
  zmq::message_t make(uint64_t generation,
                      const std::function<void(wire::Envelope::Builder)>& fill);
  const wire::SenderInfo& sender() const { return from_; }
  uint64_t next_seq() const { return seq_ + 1; }  // the seq of the next message made

 private:
  wire::SenderInfo from_;
  uint64_t seq_ = 0;
};

// Logs refused frames without letting a flood of them flood the log: at most
// one line per reason per `period`, with the count of those suppressed.
class DropLog {
 public:
  explicit DropLog(std::chrono::milliseconds period = std::chrono::seconds(1)) : period_(period) {}
  void refused(const std::string& from, const std::string& why);
  uint64_t total() const { return total_; }

 private:
  struct Entry {
    int64_t last_ms = -1;
    uint64_t suppressed = 0;
  };
  std::chrono::milliseconds period_;
  std::map<std::string, Entry> by_reason_;
  uint64_t total_ = 0;
};

// What a receiver of this job accepts: its id and the frame size limit.
wire::Expect expect_for(const JobConfig& config);
// The coordinator's: frames of other jobs are opened too, to be answered with a Refusal.
wire::Expect expect_any_job(const JobConfig& config);

// The launch (one start of a job) this process belongs to: `flag` (--launch),
// else $SACCADE_LAUNCH, else "slurm-$SLURM_JOB_ID", else a fresh random token
// when `generate` (the coordinator) or "" (an agent that accepts any launch).
// Sets it as the process's launch (wire::set_process_launch) and exports
// $SACCADE_LAUNCH so that the actors an agent starts belong to it too.
inline constexpr const char* kLaunchVariable = "SACCADE_LAUNCH";
std::string resolve_launch(const std::string& flag, bool generate);

}  // namespace saccade::control
