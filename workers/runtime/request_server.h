// The serving side of the request/response planes between actors: data actors
// answer learners' BatchRequests, rollout actors answer a policy learner's
// Weights and RolloutRequests (workers/runtime/request_client.h is the other side).
//
// One ROUTER (plus an ipc:// endpoint for peers on the same node when asked),
// CURVE with its own ZAP handler when on, every frame validated before the
// handler sees it: garbage, another job's frames and oversized frames are
// dropped and logged (rate-limited), never a crash. Torch-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "control/control.h"
#include "schemas/wire.h"

namespace saccade::runtime {

struct RequestServerOptions {
  std::string endpoint;        // where the ROUTER binds (tcp://HOST:PORT; port * picks one)
  std::string local_endpoint;  // also bound when set: ipc://PATH for peers on this node
  control::Security security;  // CURVE server (the job's server key pair) when on
  wire::SenderInfo sender;     // this actor in the envelopes it sends
  wire::Expect expect;         // job id and frame size limit of what it accepts
};

class RequestServer;

// One valid request and the means to answer it; lives for one handler call.
class Exchange {
 public:
  const wire::Message& message() const { return message_; }
  wire::Envelope::Reader envelope() const { return message_.envelope(); }
  const std::string& sender() const { return sender_; }  // "learner 0"
  // Sends one reply to the requester; false when it could not leave (peer gone, queue full).
  bool reply(const std::function<void(wire::Envelope::Builder)>& fill);
  // Drops the request: logged (rate-limited) and counted, nothing is answered.
  void refuse(const std::string& why);

 private:
  friend class RequestServer;
  Exchange(RequestServer& server, zmq::message_t& identity, const wire::Message& message,
           std::string sender)
      : server_(server), identity_(identity), message_(message), sender_(std::move(sender)) {}
  RequestServer& server_;
  zmq::message_t& identity_;  // the requester's routing id, borrowed
  const wire::Message& message_;
  std::string sender_;
};

class RequestServer {
 public:
  // Binds the socket(s). Throws std::runtime_error naming an endpoint it cannot bind.
  explicit RequestServer(RequestServerOptions options);
  ~RequestServer();  // closes the socket, then removes its ipc socket file
  RequestServer(const RequestServer&) = delete;
  RequestServer& operator=(const RequestServer&) = delete;

  // Hands each valid message to `handle` until `stopping()` is true; calls it
  // at least every 50 ms while idle and between messages. Exceptions from
  // `handle` propagate (a data error the actor cannot skip).
  void serve(const std::function<bool()>& stopping, const std::function<void(Exchange&)>& handle);

  std::string endpoint() const { return bound_; }              // wildcard port resolved
  std::string local_endpoint() const { return bound_local_; }  // "" when none
  uint64_t dropped() const { return dropped_.load(); }         // frames and requests refused

 private:
  friend class Exchange;
  void refuse(const std::string& from, const std::string& why);

  RequestServerOptions options_;
  zmq::context_t context_;                  // own context: its ZAP handler is this server's
  std::optional<control::ZapHandler> zap_;  // when CURVE is on
  zmq::socket_t router_;
  std::string bound_, bound_local_;
  control::EnvelopeWriter writer_;
  control::DropLog drops_;
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace saccade::runtime
