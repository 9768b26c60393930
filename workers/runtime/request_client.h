// The requesting side of the request/response planes between actors
// (workers/runtime/request_server.h is the other): a learner's batches from
// data actors, a policy learner's rollouts from rollout actors.
//
// The client owns one DEALER per peer and the requests' bookkeeping; a
// RequestProtocol says what a request is on the wire and what an answer means.
// Requests go out in submission order to the least loaded peer with room, at
// most queue_depth outstanding per peer (back-pressure). A peer that answers
// none of its requests for request_timeout is re-dialed (a fresh socket: no
// late answer of the old one is waited for), trusted with one request at a
// time until it answers again, and its requests go to another. Malformed
// frames are dropped and logged (rate-limited). Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "control/control.h"
#include "schemas/wire.h"

namespace saccade::runtime {

struct RequestClientOptions {
  std::vector<std::string> endpoints;                // the peers
  int queue_depth = 1;                               // requests outstanding per peer
  std::chrono::milliseconds request_timeout{10000};  // silence before a peer's requests move
  control::Security security;                        // CURVE client keys when on
  wire::SenderInfo sender;                           // this actor in its envelopes
  wire::Expect expect;                               // job id and frame size limit
  std::string peer_kind = "peer";                    // what the peers are, in logs
};

// A peer's connection as a protocol sees it while sending.
class PeerLink {
 public:
  PeerLink(zmq::socket_t& socket, control::EnvelopeWriter& writer)
      : socket_(socket), writer_(writer) {}
  // Sends one message; false when the connection is not up yet (sockets are
  // `immediate`, so nothing queues on a dead endpoint).
  bool send(const std::function<void(wire::Envelope::Builder)>& fill);
  uint64_t next_seq() const { return writer_.next_seq(); }  // the seq send() will use

 private:
  zmq::socket_t& socket_;            // borrowed from the client
  control::EnvelopeWriter& writer_;  // borrowed from the client
};

// What a valid message from a peer means to the requests.
struct Answer {
  enum class Kind {
    kIgnored,   // stale, a duplicate, or nothing to the requests
    kProgress,  // part of `request`'s answer came: its peer is alive
    kDone,      // `request` is fully answered
    kRetry,     // `request` must be sent again (preferably elsewhere); `why` is logged
  };
  Kind kind = Kind::kIgnored;
  uint64_t request = 0;
  std::string why;      // kRetry: why it goes again
  std::string dropped;  // non-empty: the message was refused, logged and counted as dropped
};

class RequestProtocol {
 public:
  virtual ~RequestProtocol() = default;
  // Sends request `id` to peer `peer`; false when the connection is not up yet.
  virtual bool send(uint64_t id, size_t peer, PeerLink& link) = 0;
  // What the valid message `message` from peer `peer` means; the protocol may keep the
  // message (e.g. a batch read in place). May throw to abort.
  virtual Answer accept(size_t peer, wire::Message&& message) = 0;
  // Peer `peer` got a fresh socket: whatever it held (e.g. weights) is gone.
  virtual void redialed(size_t /*peer*/) {}
};

class RequestClient {
 public:
  // Connects to every endpoint; borrows `protocol`, which must outlive it.
  // Throws std::invalid_argument naming a bad option.
  RequestClient(RequestClientOptions options, RequestProtocol& protocol);
  ~RequestClient();
  RequestClient(const RequestClient&) = delete;
  RequestClient& operator=(const RequestClient&) = delete;

  // Queues request `id` (unique among unfinished ones) for sending.
  void submit(uint64_t id);
  // Waits until every peer's connection is up (true), or `limit` passed or
  // `stopping()` (false): at a job's start the first requests then spread over
  // all peers instead of going to whichever connected first.
  bool wait_connected(std::chrono::milliseconds limit, const std::function<bool()>& stopping);
  // Forgets every unfinished request (an aborted batch); late answers are stale.
  void clear();
  // Sends, receives and re-sends until `done()` is true (true) or `stopping()`
  // is (false); calls both at least every 100 ms.
  bool run_until(const std::function<bool()>& done, const std::function<bool()>& stopping);

  size_t peers() const { return peers_.size(); }
  uint64_t resent() const { return resent_; }          // requests sent again
  uint64_t dropped() const { return drops_.total(); }  // frames refused

 private:
  struct Peer;     // one peer's socket and load
  struct Request;  // where a submitted request stands

  void dispatch(int64_t now);
  void receive(size_t peer, int64_t now);
  void expire(int64_t now);
  void dial(Peer& peer);
  void release(uint64_t id, int avoid);  // back to "to send", away from `avoid`
  int room(const Peer& peer) const;

  RequestClientOptions options_;
  RequestProtocol& protocol_;  // borrowed
  zmq::context_t context_;     // owns the sockets' I/O; outlives peers_
  std::vector<std::unique_ptr<Peer>> peers_;
  std::map<uint64_t, Request> requests_;  // unfinished, by id; sent in id order
  control::EnvelopeWriter writer_;
  control::DropLog drops_;
  uint64_t resent_ = 0;
  int64_t unsendable_since_ms_ = -1;  // requests waiting and no peer reachable, since then
};

}  // namespace saccade::runtime
