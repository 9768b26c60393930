#include "workers/runtime/request_client.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace saccade::runtime {

namespace {
constexpr int64_t kMaxWaitMs = 100;  // longest wait between calls of done() and stopping()
constexpr int kMaxReceivesPerTurn = 64;
}  // namespace

bool PeerLink::send(const std::function<void(wire::Envelope::Builder)>& fill) {
  zmq::message_t frame = writer_.make(0, fill);
  return socket_.send(frame, zmq::send_flags::dontwait).has_value();
}

struct RequestClient::Peer {
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;  // owned; replaced when re-dialed
  int in_flight = 0;                      // requests it holds
  int64_t progress_ms = 0;                // its last answer, or when it last got work while idle
  bool suspect = false;                   // timed out and silent since: one request at a time
};

struct RequestClient::Request {
  int peer = -1;   // the peer it waits on; -1: to send
  int avoid = -1;  // the peer that last failed it: another is preferred
};

RequestClient::RequestClient(RequestClientOptions options, RequestProtocol& protocol)
    : options_(std::move(options)), protocol_(protocol), writer_(options_.sender) {
  if (options_.endpoints.empty())
    throw std::invalid_argument(
        fmt::format("no {} endpoint to send requests to", options_.peer_kind));
  if (options_.queue_depth < 1)
    throw std::invalid_argument(
        fmt::format("queue depth: expected >= 1 request per peer, got {}", options_.queue_depth));
  if (options_.request_timeout.count() < 1)
    throw std::invalid_argument(
        fmt::format("request timeout: expected >= 1 ms, got {}", options_.request_timeout.count()));
  for (const std::string& endpoint : options_.endpoints) {
    auto peer = std::make_unique<Peer>();
    peer->endpoint = endpoint;
    dial(*peer);
    peers_.push_back(std::move(peer));
  }
}

RequestClient::~RequestClient() = default;

void RequestClient::dial(Peer& peer) {
  peer.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  control::configure_client(*peer.socket, options_.security, "");
  peer.socket->set(zmq::sockopt::linger, 0);  // unanswered requests are not worth a wait
  if (options_.expect.max_frame_bytes > 0)
    peer.socket->set(zmq::sockopt::maxmsgsize,
                     static_cast<int64_t>(options_.expect.max_frame_bytes));
  peer.socket->connect(peer.endpoint);
}

int RequestClient::room(const Peer& peer) const {
  return (peer.suspect ? 1 : options_.queue_depth) - peer.in_flight;
}

void RequestClient::submit(uint64_t id) {
  if (!requests_.emplace(id, Request{}).second)
    throw std::logic_error(fmt::format("request {} submitted twice", id));
}

bool RequestClient::wait_connected(std::chrono::milliseconds limit,
                                   const std::function<bool()>& stopping) {
  const int64_t deadline = control::steady_ms() + limit.count();
  std::vector<bool> up(peers_.size(), false);
  for (;;) {
    std::vector<zmq::pollitem_t> items;
    std::vector<size_t> waiting;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (up[i]) continue;
      items.push_back({peers_[i]->socket->handle(), 0, ZMQ_POLLOUT, 0});
      waiting.push_back(i);
    }
    if (items.empty()) return true;
    const int64_t left = deadline - control::steady_ms();
    if (left <= 0 || stopping()) return false;
    // `immediate` sockets are writable only once their connection is up.
    control::poll_interruptible(items.data(), items.size(),
                                std::chrono::milliseconds(std::min(left, kMaxWaitMs)));
    for (size_t k = 0; k < items.size(); ++k) {
      if (items[k].revents & ZMQ_POLLOUT) up[waiting[k]] = true;
    }
  }
}

void RequestClient::clear() {
  requests_.clear();
  for (auto& p : peers_) p->in_flight = 0;
}

bool RequestClient::run_until(const std::function<bool()>& done,
                              const std::function<bool()>& stopping) {
  for (;;) {
    if (stopping()) return false;
    dispatch(control::steady_ms());
    if (done()) return true;
    // Wait for answers, for room to send (a connected peer), or the next deadline.
    const bool to_send = std::any_of(requests_.begin(), requests_.end(),
                                     [](const auto& r) { return r.second.peer < 0; });
    const int64_t now = control::steady_ms();
    int64_t wait = kMaxWaitMs;
    std::vector<zmq::pollitem_t> items;
    for (const auto& p : peers_) {
      const bool can_send = to_send && room(*p) > 0;
      items.push_back({p->socket->handle(), 0,
                       static_cast<short>(ZMQ_POLLIN | (can_send ? ZMQ_POLLOUT : 0)), 0});
      if (p->in_flight > 0)
        wait = std::min(wait, p->progress_ms + options_.request_timeout.count() - now);
    }
    control::poll_interruptible(items.data(), items.size(),
                                std::chrono::milliseconds(std::max<int64_t>(wait, 0)));
    const int64_t after = control::steady_ms();
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) receive(i, after);
    }
    expire(after);
  }
}

void RequestClient::dispatch(int64_t now) {
  std::vector<bool> unreachable(peers_.size(), false);  // a send failed in this pass
  bool waiting = false, stuck = false;
  for (auto& [id, r] : requests_) {
    if (r.peer >= 0) continue;
    waiting = true;
    for (;;) {
      // The least loaded peer with room, trusted ones first, the one that failed r last.
      int best = -1;
      std::tuple<bool, bool, int> best_key{};
      for (size_t i = 0; i < peers_.size(); ++i) {
        const Peer& p = *peers_[i];
        if (unreachable[i] || room(p) < 1) continue;
        const std::tuple<bool, bool, int> key{p.suspect, static_cast<int>(i) == r.avoid,
                                              p.in_flight};
        if (best < 0 || key < best_key) {
          best = static_cast<int>(i);
          best_key = key;
        }
      }
      if (best < 0) {
        stuck = true;
        break;
      }
      Peer& p = *peers_[static_cast<size_t>(best)];
      PeerLink link(*p.socket, writer_);
      if (!protocol_.send(id, static_cast<size_t>(best), link)) {
        unreachable[static_cast<size_t>(best)] = true;
        continue;
      }
      if (p.in_flight++ == 0) p.progress_ms = now;
      r.peer = best;
      break;
    }
  }
  if (!waiting || !stuck) {
    unsendable_since_ms_ = -1;
  } else if (unsendable_since_ms_ < 0) {
    unsendable_since_ms_ = now;
  } else if (now - unsendable_since_ms_ > options_.request_timeout.count()) {
    std::vector<std::string> down;  // peers with room whose connection is not up
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (unreachable[i]) down.push_back(peers_[i]->endpoint);
    }
    if (!down.empty()) {
      spdlog::warn("{} {} not reachable for {} ms (down, or CURVE keys refused?)",
                   options_.peer_kind, fmt::join(down, ", "), now - unsendable_since_ms_);
    }
    unsendable_since_ms_ = now;  // warn again one timeout later
  }
}

void RequestClient::release(uint64_t id, int avoid) {
  const auto found = requests_.find(id);
  if (found == requests_.end()) return;
  Request& r = found->second;
  if (r.peer >= 0) --peers_[static_cast<size_t>(r.peer)]->in_flight;
  r.peer = -1;
  r.avoid = avoid;
  ++resent_;
}

void RequestClient::receive(size_t index, int64_t now) {
  Peer& peer = *peers_[index];
  for (int n = 0; n < kMaxReceivesPerTurn; ++n) {
    wire::Received r = wire::recv_message(*peer.socket, options_.expect, zmq::recv_flags::dontwait);
    if (r.status == wire::RecvStatus::kNothing) return;
    if (r.status == wire::RecvStatus::kRefused) {
      drops_.refused(peer.endpoint, r.why);
      continue;
    }
    const Answer answer = protocol_.accept(index, std::move(*r.message));
    if (!answer.dropped.empty()) drops_.refused(peer.endpoint, answer.dropped);
    const auto found = requests_.find(answer.request);
    if (answer.kind == Answer::Kind::kIgnored || found == requests_.end())
      continue;              // stale: a request finished, or never asked for
    peer.progress_ms = now;  // it answers: alive
    peer.suspect = false;
    Request& request = found->second;
    if (answer.kind == Answer::Kind::kRetry) {
      if (request.peer != static_cast<int>(index)) continue;  // already moved elsewhere
      spdlog::warn("request {} to {} {}: sending it again", answer.request, peer.endpoint,
                   answer.why);
      release(answer.request, static_cast<int>(index));
    } else if (answer.kind == Answer::Kind::kDone) {
      // From whichever peer it came (a re-sent request may be answered by its first peer).
      if (request.peer >= 0) --peers_[static_cast<size_t>(request.peer)]->in_flight;
      requests_.erase(found);
    }
  }
}

void RequestClient::expire(int64_t now) {
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = *peers_[i];
    if (p.in_flight == 0 || now - p.progress_ms <= options_.request_timeout.count()) continue;
    spdlog::warn(
        "{} {} answered none of its {} request(s) for {} ms: re-dialing it, they go to "
        "another",
        options_.peer_kind, p.endpoint, p.in_flight, now - p.progress_ms);
    for (auto& [id, r] : requests_) {
      if (r.peer == static_cast<int>(i)) release(id, static_cast<int>(i));
    }
    p.in_flight = 0;
    p.suspect = true;
    dial(p);  // a fresh socket: no late answer of the old one is waited for
    protocol_.redialed(i);
  }
}

}  // namespace saccade::runtime
