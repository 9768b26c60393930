#include "control/control.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

namespace saccade::control {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void poll_interruptible(zmq::pollitem_t* items, size_t n, std::chrono::milliseconds timeout) {
  for (size_t i = 0; i < n; ++i) items[i].revents = 0;
  try {
    zmq::poll(items, n, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (size_t i = 0; i < n; ++i) items[i].revents = 0;
  }
}

std::string tcp_endpoint(const std::string& host_port, const std::string& what) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    throw std::invalid_argument(fmt::format("{}: expected HOST:PORT, got \"{}\"", what, host_port));
  }
  const std::string port = host_port.substr(colon + 1);
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || value > 65535) {
      throw std::invalid_argument(
          fmt::format("{}: expected a port number after ':', got \"{}\"", what, port));
    }
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) {
    throw std::invalid_argument(fmt::format("{}: port must be 1..65535, got {}", what, port));
  }
  return "tcp://" + host_port;
}

namespace {
constexpr std::pair<wire::Role, const char*> kRoles[] = {
    {wire::Role::UNKNOWN, "unknown"}, {wire::Role::COORDINATOR, "coordinator"},
    {wire::Role::AGENT, "agent"},     {wire::Role::DATA, "data"},
    {wire::Role::LEARNER, "learner"}, {wire::Role::ROLLOUT, "rollout"},
    {wire::Role::EVAL, "eval"},       {wire::Role::CLIENT, "client"}};
}  // namespace

const char* role_name(wire::Role role) {
  for (auto [r, name] : kRoles) {
    if (r == role) return name;
  }
  return "unknown";
}

wire::Role role_from_name(const std::string& name) {
  for (auto [r, n] : kRoles) {
    if (name == n) return r;
  }
  throw std::invalid_argument(fmt::format(
      "role: expected one of data, learner, rollout, eval (or agent, coordinator, client), got "
      "\"{}\"",
      name));
}

const char* state_name(wire::ActorState state) {
  switch (state) {
    case wire::ActorState::STARTING:
      return "starting";
    case wire::ActorState::RUNNING:
      return "running";
    case wire::ActorState::DRAINING:
      return "draining";
    case wire::ActorState::EXITED:
      return "exited";
    case wire::ActorState::FAILED:
      return "failed";
    case wire::ActorState::RESTARTING:
      return "restarting";
  }
  return "unknown";
}

std::string agent_identity(const std::string& node) {
  return "n:" + node;
}

std::string actor_identity(wire::Role role, int32_t rank) {
  return fmt::format("a:{}/{}", role_name(role), rank);
}

CurveKeys generate_curve_keys() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    throw std::runtime_error(std::string("CURVE key generation failed (libzmq without CURVE?): ") +
                             zmq_strerror(zmq_errno()));
  }
  return {pub, sec};
}

namespace {

void write_file(const std::filesystem::path& file, const std::string& text, bool secret) {
  std::ofstream out(file, std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("{}: cannot write the key file", file.string()));
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("{}: write failed", file.string()));
  ::chmod(file.c_str(), secret ? 0600 : 0644);
}

std::string key_text(const std::string& what, const CurveKeys& keys, bool with_secret) {
  std::string text =
      fmt::format("# saccade {} CURVE key ({}); ZeroMQ Z85\npublic = \"{}\"\n", what,
                  with_secret ? "key pair: keep secret" : "public half", keys.public_key);
  if (with_secret) text += fmt::format("secret = \"{}\"\n", keys.secret_key);
  return text;
}

}  // namespace

void write_key_files(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  for (const char* who : {"server", "client"}) {
    const CurveKeys keys = generate_curve_keys();
    write_file(dir / (std::string(who) + ".key"), key_text(who, keys, true), true);
    write_file(dir / (std::string(who) + ".pub"), key_text(who, keys, false), false);
  }
}

CurveKeys read_key_file(const std::filesystem::path& file, bool need_secret) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open the key file", file.string()));
  CurveKeys keys;
  std::string line;
  while (std::getline(in, line)) {
    for (auto [name, field] : {std::pair<const char*, std::string*>{"public", &keys.public_key},
                               {"secret", &keys.secret_key}}) {
      const std::string prefix = std::string(name) + " = \"";
      if (line.rfind(prefix, 0) == 0 && line.size() == prefix.size() + 41 && line.back() == '"') {
        *field = line.substr(prefix.size(), 40);
      }
    }
  }
  uint8_t raw[32];
  if (keys.public_key.empty() || !zmq_z85_decode(raw, keys.public_key.c_str())) {
    throw std::runtime_error(
        fmt::format("{}: expected a line public = \"<40 Z85 characters>\" (saccade keys generate)",
                    file.string()));
  }
  if (need_secret && (keys.secret_key.empty() || !zmq_z85_decode(raw, keys.secret_key.c_str()))) {
    throw std::runtime_error(fmt::format(
        "{}: expected a line secret = \"<40 Z85 characters>\": this process needs the key pair "
        "file, not the public half",
        file.string()));
  }
  return keys;
}

Security load_security(const SecurityConfig& config, bool as_server) {
  Security s;
  s.curve = config.curve;
  if (!s.curve) return s;
  if (!zmq_has("curve")) {
    throw std::runtime_error("security.curve = true but this libzmq was built without CURVE");
  }
  if (as_server) {
    const CurveKeys server = read_key_file(config.server_key, true);
    s.server_public = server.public_key;
    s.server_secret = server.secret_key;
    s.client = read_key_file(config.client_key, false);
  } else {
    s.server_public = read_key_file(config.server_public_key, false).public_key;
    s.client = read_key_file(config.client_key, true);
  }
  return s;
}

void configure_client(zmq::socket_t& socket, const Security& security,
                      const std::string& identity) {
  socket.set(zmq::sockopt::linger, 1000);  // flush a final event, never block exit long
  socket.set(zmq::sockopt::immediate, 1);  // no queueing towards a coordinator that is down
  socket.set(zmq::sockopt::reconnect_ivl, 100);
  socket.set(zmq::sockopt::reconnect_ivl_max, 2000);
  if (!identity.empty()) socket.set(zmq::sockopt::routing_id, identity);
  if (security.curve) {
    socket.set(zmq::sockopt::curve_serverkey, security.server_public);
    socket.set(zmq::sockopt::curve_publickey, security.client.public_key);
    socket.set(zmq::sockopt::curve_secretkey, security.client.secret_key);
  }
}

void configure_server(zmq::socket_t& socket, const Security& security) {
  socket.set(zmq::sockopt::linger, 1000);
  socket.set(zmq::sockopt::router_handover, 1);  // a restarted peer takes its identity back
  if (security.curve) {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, security.server_secret);
    socket.set(zmq::sockopt::zap_domain, "saccade");
  }
}

ZapHandler::ZapHandler(zmq::context_t& context, const std::string& allowed_client_public)
    : socket_(context, zmq::socket_type::rep), allowed_(32, '\0') {
  if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(allowed_.data()), allowed_client_public.c_str()))
    throw std::invalid_argument("ZAP: the allowed client key is not 40 Z85 characters");
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

void ZapHandler::handle_one() {
  std::vector<zmq::message_t> parts;
  for (;;) {
    zmq::message_t part;
    if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) break;
  }
  if (parts.size() < 2) return;
  // Request: version, request id, domain, address, identity, mechanism, credentials.
  bool ok = parts.size() >= 7 && parts[5].to_string() == "CURVE" && parts[6].size() == 32 &&
            parts[6].to_string() == allowed_;
  if (!ok) {
    ++refused_;
    spdlog::warn("refused a connection from {}: {}", parts.size() > 3 ? parts[3].to_string() : "?",
                 parts.size() > 5 && parts[5].to_string() != "CURVE"
                     ? "not a CURVE handshake"
                     : "client key is not this job's");
  }
  const std::string status = ok ? "200" : "400";
  const std::string text = ok ? "OK" : "unknown client key";
  socket_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  socket_.send(parts[1], zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  socket_.send(zmq::str_buffer("job-client"), zmq::send_flags::sndmore);
  socket_.send(zmq::message_t(), zmq::send_flags::none);
}

zmq::message_t EnvelopeWriter::make(uint64_t generation,
                                    const std::function<void(wire::Envelope::Builder)>& fill) {
  capnp::MallocMessageBuilder builder;
  wire::Envelope::Builder env = wire::start_envelope(builder, from_, generation, ++seq_);
  fill(env);
  return wire::to_zmq(builder);
}

void DropLog::refused(const std::string& from, const std::string& why) {
  ++total_;
  // Keyed by the reason's first words so that sizes and ids do not defeat the limit.
  const std::string key = why.substr(0, why.find_first_of("0123456789\""));
  if (by_reason_.size() > 256 && !by_reason_.count(key)) by_reason_.clear();  // bounded memory
  Entry& e = by_reason_[key];
  const int64_t now = steady_ms();
  if (e.last_ms >= 0 && now - e.last_ms < period_.count()) {
    ++e.suppressed;
    return;
  }
  if (e.suppressed > 0) {
    spdlog::warn("dropped a message from {}: {} ({} similar dropped since)", from, why,
                 e.suppressed);
  } else {
    spdlog::warn("dropped a message from {}: {}", from, why);
  }
  e.last_ms = now;
  e.suppressed = 0;
}

namespace {

// tcp://NAME:PORT -> tcp://ADDRESS:PORT for a host name; "" when it is no tcp
// endpoint with a host name that resolves.
std::string resolved_endpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos) return "";
  const std::string host = endpoint.substr(6, colon - 6);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (host.empty() || host == "*" || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
    return "";
  char address[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, address,
            sizeof address);
  freeaddrinfo(found);
  return address == host ? "" : fmt::format("tcp://{}{}", address, endpoint.substr(colon));
}

}  // namespace

std::string bind_router(zmq::socket_t& router, const std::string& endpoint) {
  try {
    router.bind(endpoint);
  } catch (const zmq::error_t& first) {
    const std::string resolved = resolved_endpoint(endpoint);
    try {
      if (resolved.empty()) throw first;
      router.bind(resolved);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error(fmt::format(
          "cannot bind {}{}: {}{}", endpoint, resolved.empty() ? "" : " (" + resolved + ")",
          e.what(),
          e.num() == EADDRINUSE ? ": the port is taken (another job or process on this node?)"
                                : ""));
    }
  }
  return router.get(zmq::sockopt::last_endpoint);
}

std::string interface_of(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (host.empty() || host == "*" || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
    return "";
  const in_addr wanted = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return "";
  std::string name;
  for (ifaddrs* i = interfaces; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == wanted.s_addr)
      name = i->ifa_name;
    // 127.0.0.0/8 is all loopback, though `lo` lists 127.0.0.1 only.
    else if ((i->ifa_flags & IFF_LOOPBACK) && (ntohl(wanted.s_addr) >> 24) == 127)
      name = i->ifa_name;
  }
  freeifaddrs(interfaces);
  return name;
}

std::string peer_name(const zmq::message_t& identity) {
  std::string hex = "peer ";
  const auto* bytes = identity.data<unsigned char>();
  for (size_t i = 0; i < identity.size() && i < 16; ++i) hex += fmt::format("{:02x}", bytes[i]);
  return hex;
}

std::optional<RoutedFrame> recv_routed(zmq::socket_t& router, const wire::Expect& expect) {
  RoutedFrame out;
  if (!router.recv(out.identity, zmq::recv_flags::dontwait)) return std::nullopt;
  out.from = peer_name(out.identity);
  out.received.status = wire::RecvStatus::kRefused;
  if (!out.identity.more()) {
    out.received.why = "a frame without payload";
    return out;
  }
  zmq::message_t frame;
  if (!router.recv(frame, zmq::recv_flags::dontwait)) {
    out.received.why = "a routing id without its frame";
    return out;
  }
  int extra = 0;
  for (zmq::message_t rest; frame.more() && router.recv(rest, zmq::recv_flags::dontwait);) {
    frame.swap(rest);  // drain and refuse multi-part senders
    ++extra;
  }
  if (extra > 0) {
    out.received.why = fmt::format("multi-part message with {} extra parts", extra);
    return out;
  }
  out.received = wire::open_frame(std::move(frame), expect);
  return out;
}

wire::Expect expect_for(const JobConfig& config) {
  return {config.job.name, static_cast<size_t>(config.cluster.max_message_bytes), false,
          wire::process_launch()};
}

std::string resolve_launch(const std::string& flag, bool generate) {
  std::string launch = flag;
  if (launch.empty()) {
    if (const char* env = std::getenv(kLaunchVariable)) launch = env;
  }
  if (launch.empty()) {
    if (const char* slurm = std::getenv("SLURM_JOB_ID")) launch = std::string("slurm-") + slurm;
  }
  if (launch.empty() && generate) {
    std::random_device random;
    launch = fmt::format("launch-{:08x}{:08x}", random(), random());
  }
  // Children (the agent's actors) inherit it.
  if (!launch.empty()) ::setenv(kLaunchVariable, launch.c_str(), 1);
  wire::set_process_launch(launch);
  return launch;
}

wire::Expect expect_any_job(const JobConfig& config) {
  wire::Expect e = expect_for(config);
  e.any_job = true;
  return e;
}

}  // namespace saccade::control
