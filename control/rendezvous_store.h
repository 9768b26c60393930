// The learners' rendezvous store: what c10d's Store holds (the collective
// library's addresses and ids) kept by the coordinator instead of a TCPStore on
// an open port. Learners reach it over their CURVE-protected control link
// (StoreRequest / StoreReply in schemas/messages.capnp); the coordinator keeps
// one key-value map for the current learner generation and answers blocking
// reads when their keys arrive, their timeout passes or the generation ends.
// Torch-free: the learner's c10d::Store adapter (workers/learner/) speaks it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "schemas/wire.h"

namespace saccade::control {

// One store operation, as a learner asks it.
struct StoreQuery {
  wire::StoreOp op = wire::StoreOp::GET;
  std::vector<std::string> keys;  // one key; check and wait: one or more
  std::string value;              // set: the value; compareSet: the value wanted
  std::string expected;           // compareSet: the value held now ("" = absent)
  int64_t delta = 0;              // add
  int64_t timeout_ms = 0;         // get and wait: how long missing keys are waited for
};

struct StoreAnswer {
  uint64_t id = 0;
  bool ok = false;
  bool timed_out = false;
  std::string error;   // why not (ok = false)
  std::string value;   // get, compareSet
  int64_t number = 0;  // add, numKeys; check and deleteKey: 1 true, 0 false
};

// Carries one query to the store and returns its answer; thread-safe (the
// collective library may ask from several threads).
using StoreTransport = std::function<StoreAnswer(const StoreQuery&)>;

// "set", "get", ... for logs and errors.
const char* store_op_name(wire::StoreOp op);

// Fills `out` from `q`; reads a request back. read_store_request throws
// std::invalid_argument naming what is wrong (an unknown op, no key).
void write_store_request(uint64_t id, uint64_t generation, const StoreQuery& q,
                         wire::StoreRequest::Builder out);
StoreQuery read_store_request(wire::StoreRequest::Reader in);
void write_store_reply(const StoreAnswer& a, wire::StoreReply::Builder out);
StoreAnswer read_store_reply(wire::StoreReply::Reader in);

// Limits of one generation's map, so that a faulty learner cannot grow the
// coordinator without bound.
struct RendezvousLimits {
  size_t max_keys = 65536;
  size_t max_bytes = 64 << 20;          // keys and values together
  size_t max_waiters_per_peer = 256;    // blocked get/wait requests of one learner
  int64_t max_timeout_ms = 30 * 60000;  // a wait never outlasts this (the config's timeouts)
};

// The coordinator's side. Pure: every call returns the answers to send now,
// each addressed to the peer that asked; time comes in as `now_ms`.
class RendezvousStore {
 public:
  struct Delivery {
    std::string to;  // the asking peer's routing id
    StoreAnswer answer;
  };

  explicit RendezvousStore(RendezvousLimits limits = {}) : limits_(limits) {}

  // Request `id` of peer `from` for `generation`. A request for another
  // generation than the current one is answered with an error at once.
  std::vector<Delivery> apply(const std::string& from, uint64_t id, uint64_t generation,
                              const StoreQuery& q, int64_t now_ms);
  // Answers the waits whose deadline passed (timed out).
  std::vector<Delivery> expire(int64_t now_ms);
  // Moves to `generation`: the keys of the one before are dropped and its
  // waiters answered with an error, so that none of them hangs. No-op when
  // `generation` is the current one.
  std::vector<Delivery> begin_generation(uint64_t generation);

  uint64_t generation() const { return generation_; }
  size_t keys() const { return map_.size(); }
  size_t waiters() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string from;
    uint64_t id = 0;
    StoreQuery query;
    int64_t deadline_ms = 0;
  };
  bool ready(const Waiter& w) const;
  StoreAnswer answer_ready(const Waiter& w) const;
  // After a write: the waiters whose keys all exist now.
  void wake(std::vector<Delivery>& out);
  std::string put(const std::string& key, std::string value);  // "" or why not (limits)

  RendezvousLimits limits_;
  uint64_t generation_ = 0;
  std::map<std::string, std::string> map_;
  size_t bytes_ = 0;
  std::vector<Waiter> waiters_;
};

}  // namespace saccade::control
