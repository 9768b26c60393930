#include "workers/learner/coordinator_store.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <stdexcept>
#include <utility>

namespace saccade::learner {
namespace {

using Bytes = std::vector<uint8_t>;

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

Bytes bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

// What c10d throws for a store failure: 2.x has an error type of its own.
[[noreturn]] void store_error(const std::string& what) {
#if TORCH_VERSION_MAJOR >= 2
  C10_THROW_ERROR(DistStoreError, what);
#else
  throw std::runtime_error(what);
#endif
}

class CoordinatorStore final : public c10d::Store {
 public:
  CoordinatorStore(StoreTransport transport, std::chrono::milliseconds max_timeout)
      : c10d::Store(max_timeout), transport_(std::move(transport)), max_timeout_(max_timeout) {}

#if TORCH_VERSION_MAJOR >= 2
  // 2.x: a copy for another thread, on the same transport (which is thread-safe).
  c10::intrusive_ptr<c10d::Store> clone() override {
    auto copy = c10::make_intrusive<CoordinatorStore>(transport_, max_timeout_);
    copy->setTimeout(timeout_);
    return copy;
  }
#endif

  void set(const std::string& key, const Bytes& value) override {
    control::StoreQuery q = query(wire::StoreOp::SET, key);
    q.value = text(value);
    ask(q);
  }

  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    control::StoreQuery q = query(wire::StoreOp::COMPARE_SET, key);
    q.expected = text(expected);
    q.value = text(desired);
    return bytes(ask(q).value);
  }

  // Like TCPStore's: waits (up to the store's timeout) for the key to be set.
  Bytes get(const std::string& key) override {
    control::StoreQuery q = query(wire::StoreOp::GET, key);
    q.timeout_ms = bounded(timeout_).count();
    return bytes(ask(q).value);
  }

  int64_t add(const std::string& key, int64_t value) override {
    control::StoreQuery q = query(wire::StoreOp::ADD, key);
    q.delta = value;
    return ask(q).number;
  }

  bool deleteKey(const std::string& key) override {
    return ask(query(wire::StoreOp::DELETE_KEY, key)).number != 0;
  }

  bool check(const std::vector<std::string>& keys) override {
    control::StoreQuery q = query(wire::StoreOp::CHECK);
    q.keys = keys;
    return ask(q).number != 0;
  }

  int64_t getNumKeys() override {
    return ask(query(wire::StoreOp::NUM_KEYS)).number;
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    control::StoreQuery q = query(wire::StoreOp::WAIT);
    q.keys = keys;
    q.timeout_ms = bounded(timeout).count();
    ask(q);
  }

 private:
  control::StoreQuery query(wire::StoreOp op, const std::string& key = {}) const {
    control::StoreQuery q;
    q.op = op;
    if (!key.empty()) q.keys = {key};
    q.timeout_ms = max_timeout_.count();  // how long the link waits for any answer
    return q;
  }

  // c10d's "no timeout" (0) and anything longer than the config allows become the cap.
  std::chrono::milliseconds bounded(std::chrono::milliseconds t) const {
    return t.count() <= 0 || t > max_timeout_ ? max_timeout_ : t;
  }

  control::StoreAnswer ask(const control::StoreQuery& q) {
    control::StoreAnswer a = transport_(q);
    if (!a.ok) {
      std::string keys;
      for (const std::string& k : q.keys) keys += (keys.empty() ? "" : ", ") + k;
      store_error(fmt::format("rendezvous store {} {}: {}", control::store_op_name(q.op), keys,
                              a.error.empty() ? "failed" : a.error));
    }
    return a;
  }

  StoreTransport transport_;
  std::chrono::milliseconds max_timeout_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> make_coordinator_store(StoreTransport transport,
                                                       std::chrono::milliseconds max_timeout) {
  if (!transport) throw std::invalid_argument("make_coordinator_store: no transport");
  if (max_timeout.count() <= 0)
    throw std::invalid_argument("make_coordinator_store: the timeout must be positive");
  return c10::make_intrusive<CoordinatorStore>(std::move(transport), max_timeout);
}

}  // namespace saccade::learner
