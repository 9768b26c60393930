#include "control/rendezvous_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace saccade::control {
namespace {

std::string bytes_of(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

kj::ArrayPtr<const kj::byte> data_of(const std::string& s) {
  return {reinterpret_cast<const kj::byte*>(s.data()), s.size()};
}

// c10d keys are text in practice; a key is quoted for logs and errors, cut short.
std::string shown(const std::string& key) {
  std::string out;
  for (char c : key.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "\"" + out + (key.size() > 80 ? "...\"" : "\"");
}

bool needs_keys(wire::StoreOp op) {
  return op != wire::StoreOp::NUM_KEYS;
}

StoreAnswer failed(uint64_t id, std::string why, bool timed_out = false) {
  StoreAnswer a;
  a.id = id;
  a.ok = false;
  a.timed_out = timed_out;
  a.error = std::move(why);
  return a;
}

}  // namespace

const char* store_op_name(wire::StoreOp op) {
  switch (op) {
    case wire::StoreOp::SET:
      return "set";
    case wire::StoreOp::GET:
      return "get";
    case wire::StoreOp::ADD:
      return "add";
    case wire::StoreOp::COMPARE_SET:
      return "compareSet";
    case wire::StoreOp::CHECK:
      return "check";
    case wire::StoreOp::DELETE_KEY:
      return "deleteKey";
    case wire::StoreOp::NUM_KEYS:
      return "getNumKeys";
    case wire::StoreOp::WAIT:
      return "wait";
  }
  return "unknown";
}

void write_store_request(uint64_t id, uint64_t generation, const StoreQuery& q,
                         wire::StoreRequest::Builder out) {
  out.setId(id);
  out.setGeneration(generation);
  out.setOp(q.op);
  auto keys = out.initKeys(static_cast<unsigned>(q.keys.size()));
  for (unsigned i = 0; i < q.keys.size(); ++i) keys.set(i, data_of(q.keys[i]));
  out.setValue(data_of(q.value));
  out.setExpected(data_of(q.expected));
  out.setDelta(q.delta);
  out.setTimeoutMs(q.timeout_ms);
}

StoreQuery read_store_request(wire::StoreRequest::Reader in) {
  StoreQuery q;
  q.op = in.getOp();
  if (static_cast<uint16_t>(q.op) > static_cast<uint16_t>(wire::StoreOp::WAIT))
    throw std::invalid_argument(
        fmt::format("unknown store operation {}", static_cast<uint16_t>(q.op)));
  for (auto k : in.getKeys()) q.keys.push_back(bytes_of(k));
  if (needs_keys(q.op) && q.keys.empty())
    throw std::invalid_argument("a store operation without a key");
  if (q.keys.size() > 1 && q.op != wire::StoreOp::CHECK && q.op != wire::StoreOp::WAIT)
    throw std::invalid_argument("several keys for a one-key store operation");
  q.value = bytes_of(in.getValue());
  q.expected = bytes_of(in.getExpected());
  q.delta = in.getDelta();
  q.timeout_ms = in.getTimeoutMs();
  return q;
}

void write_store_reply(const StoreAnswer& a, wire::StoreReply::Builder out) {
  out.setId(a.id);
  out.setOk(a.ok);
  out.setError(a.error);
  out.setTimedOut(a.timed_out);
  out.setValue(data_of(a.value));
  out.setNumber(a.number);
}

StoreAnswer read_store_reply(wire::StoreReply::Reader in) {
  StoreAnswer a;
  a.id = in.getId();
  a.ok = in.getOk();
  a.error = in.getError();
  a.timed_out = in.getTimedOut();
  a.value = bytes_of(in.getValue());
  a.number = in.getNumber();
  return a;
}

bool RendezvousStore::ready(const Waiter& w) const {
  return std::all_of(w.query.keys.begin(), w.query.keys.end(),
                     [&](const std::string& k) { return map_.count(k) > 0; });
}

StoreAnswer RendezvousStore::answer_ready(const Waiter& w) const {
  StoreAnswer a;
  a.id = w.id;
  a.ok = true;
  if (w.query.op == wire::StoreOp::GET) a.value = map_.at(w.query.keys.front());
  return a;
}

void RendezvousStore::wake(std::vector<Delivery>& out) {
  auto keep = waiters_.begin();
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (ready(*it)) {
      out.push_back({it->from, answer_ready(*it)});
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  waiters_.erase(keep, waiters_.end());
}

std::string RendezvousStore::put(const std::string& key, std::string value) {
  auto it = map_.find(key);
  const size_t old = it == map_.end() ? 0 : key.size() + it->second.size();
  const size_t bytes = bytes_ - old + key.size() + value.size();
  if (it == map_.end() && map_.size() >= limits_.max_keys)
    return fmt::format("the generation's store holds {} keys already (the limit)", map_.size());
  if (bytes > limits_.max_bytes)
    return fmt::format("the generation's store would hold {} bytes (limit {})", bytes,
                       limits_.max_bytes);
  bytes_ = bytes;
  map_[key] = std::move(value);
  return "";
}

std::vector<RendezvousStore::Delivery> RendezvousStore::apply(const std::string& from, uint64_t id,
                                                              uint64_t generation,
                                                              const StoreQuery& q, int64_t now_ms) {
  std::vector<Delivery> out;
  auto answer = [&](StoreAnswer a) {
    a.id = id;
    out.push_back({from, std::move(a)});
    return out;
  };
  if (generation != generation_)
    return answer(failed(id, fmt::format("generation {} is not the current one ({}): rendezvous "
                                         "again",
                                         generation, generation_)));
  if (needs_keys(q.op) && q.keys.empty()) return answer(failed(id, "no key"));
  StoreAnswer ok;
  ok.ok = true;
  const std::string key = q.keys.empty() ? std::string() : q.keys.front();
  switch (q.op) {
    case wire::StoreOp::SET: {
      if (std::string why = put(key, q.value); !why.empty()) return answer(failed(id, why));
      answer(ok);
      wake(out);
      return out;
    }
    case wire::StoreOp::ADD: {
      int64_t now = 0;
      if (auto it = map_.find(key); it != map_.end()) {
        const std::string& v = it->second;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), now);
        if (ec != std::errc() || end != v.data() + v.size() || v.empty())
          return answer(failed(id, fmt::format("key {} holds no integer to add to", shown(key))));
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(now, q.delta, &sum))
        return answer(
            failed(id, fmt::format("key {}: {} + {} overflows", shown(key), now, q.delta)));
      if (std::string why = put(key, std::to_string(sum)); !why.empty())
        return answer(failed(id, why));
      ok.number = sum;
      answer(ok);
      wake(out);
      return out;
    }
    case wire::StoreOp::COMPARE_SET: {
      // c10d's TCPStore semantics: an absent key is set only when `expected` is
      // empty; the answer is the value held afterwards (`expected` when absent).
      auto it = map_.find(key);
      if (it == map_.end()) {
        if (!q.expected.empty()) {
          ok.value = q.expected;
          return answer(ok);
        }
      } else if (it->second != q.expected) {
        ok.value = it->second;
        return answer(ok);
      }
      if (std::string why = put(key, q.value); !why.empty()) return answer(failed(id, why));
      ok.value = q.value;
      answer(ok);
      wake(out);
      return out;
    }
    case wire::StoreOp::CHECK:
      ok.number = ready(Waiter{from, id, q, 0}) ? 1 : 0;
      return answer(ok);
    case wire::StoreOp::DELETE_KEY: {
      auto it = map_.find(key);
      ok.number = it == map_.end() ? 0 : 1;
      if (it != map_.end()) {
        bytes_ -= key.size() + it->second.size();
        map_.erase(it);
      }
      return answer(ok);
    }
    case wire::StoreOp::NUM_KEYS:
      ok.number = static_cast<int64_t>(map_.size());
      return answer(ok);
    case wire::StoreOp::GET:
    case wire::StoreOp::WAIT: {
      Waiter w{from, id, q, 0};
      if (ready(w)) return answer(answer_ready(w));
      const size_t mine = static_cast<size_t>(std::count_if(
          waiters_.begin(), waiters_.end(), [&](const Waiter& o) { return o.from == from; }));
      if (mine >= limits_.max_waiters_per_peer)
        return answer(failed(id, fmt::format("{} requests of this peer wait already", mine)));
      const int64_t timeout = q.timeout_ms <= 0 ? limits_.max_timeout_ms
                                                : std::min(q.timeout_ms, limits_.max_timeout_ms);
      w.deadline_ms = now_ms + timeout;
      waiters_.push_back(std::move(w));
      return out;
    }
  }
  return answer(failed(id, "unknown store operation"));
}

std::vector<RendezvousStore::Delivery> RendezvousStore::expire(int64_t now_ms) {
  std::vector<Delivery> out;
  auto keep = waiters_.begin();
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->deadline_ms <= now_ms) {
      std::string missing;
      for (const std::string& k : it->query.keys)
        if (!map_.count(k)) missing += (missing.empty() ? "" : ", ") + shown(k);
      out.push_back({it->from, failed(it->id,
                                      fmt::format("timed out: generation {} has no key {}",
                                                  generation_, missing),
                                      true)});
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  waiters_.erase(keep, waiters_.end());
  return out;
}

std::vector<RendezvousStore::Delivery> RendezvousStore::begin_generation(uint64_t generation) {
  std::vector<Delivery> out;
  if (generation == generation_) return out;
  for (Waiter& w : waiters_)
    out.push_back({w.from, failed(w.id, fmt::format("generation {} ended (generation {} began): "
                                                    "rendezvous again",
                                                    generation_, generation))});
  waiters_.clear();
  map_.clear();
  bytes_ = 0;
  generation_ = generation;
  return out;
}

}  // namespace saccade::control
