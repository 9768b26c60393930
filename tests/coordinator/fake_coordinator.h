// A ROUTER where the coordinator would be, driven by the test: it reads what an
// actor sends when the test says so, and sends it hand-made envelopes.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control/control.h"
#include "schemas/wire.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {

// An envelope of job `job` from (role, rank) on node n0, generation `generation`.
inline zmq::message_t envelope(const std::string& job, wire::Role role, int rank,
                               const std::function<void(wire::Envelope::Builder)>& fill,
                               uint64_t generation = 0) {
  control::EnvelopeWriter w({job, role, rank, "n0"});
  return w.make(generation, fill);
}

struct FakeCoordinator {
  // Binds 127.0.0.1:`port`; frames over `frame_limit` bytes or of another job than
  // "rt-test" are skipped.
  FakeCoordinator(int port, int frame_limit) : limit(frame_limit) {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::router_handover, 1);  // as the coordinator: reconnects keep their id
    router.bind(fmt::format("tcp://127.0.0.1:{}", port));
  }
  // Next (identity, message) within `timeout` (scaled), skipping refused frames.
  std::optional<std::pair<std::string, wire::Message>> next_message(
      std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, frame;
      (void)router.recv(id);
      (void)router.recv(frame);
      wire::Received r =
          wire::open_frame(std::move(frame), {"rt-test", static_cast<size_t>(limit)});
      if (r.status == wire::RecvStatus::kOk)
        return std::pair{id.to_string(), std::move(*r.message)};
    }
    return std::nullopt;
  }
  // Next (identity, kind) within `timeout`, skipping refused frames.
  std::optional<std::pair<std::string, wire::Envelope::Body::Which>> next(
      std::chrono::milliseconds timeout) {
    auto m = next_message(timeout);
    if (!m) return std::nullopt;
    return std::pair{m->first, m->second.kind()};
  }
  void send(const std::string& id, std::vector<zmq::message_t> parts) {
    router.send(zmq::buffer(id), zmq::send_flags::sndmore);
    for (size_t i = 0; i < parts.size(); ++i)
      router.send(parts[i],
                  i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  // Sends one envelope from the coordinator of generation `generation`.
  void send(const std::string& id, const std::function<void(wire::Envelope::Builder)>& fill,
            uint64_t generation = 0) {
    std::vector<zmq::message_t> parts;
    parts.push_back(envelope("rt-test", wire::Role::COORDINATOR, 0, fill, generation));
    send(id, std::move(parts));
  }
  // Reads and drops what arrives for `d` (scaled).
  void drain_for(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + scaled(d);
    while (std::chrono::steady_clock::now() < until) next(std::chrono::milliseconds(20));
  }
  const int limit;
  zmq::context_t context;
  zmq::socket_t router{context, zmq::socket_type::router};
};

}  // namespace saccade::testing
