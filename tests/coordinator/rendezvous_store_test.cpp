// The coordinator's rendezvous store without processes: c10d's semantics per
// operation, blocking reads answered when their keys arrive, when their
// deadline passes (time is an argument, not a clock) or when the generation
// ends, the limits, and the wire form of requests and answers.
#include <gtest/gtest.h>

#include "control/control.h"
#include "control/rendezvous_store.h"

namespace saccade::control {
namespace {

using Op = wire::StoreOp;

StoreQuery q(Op op, std::vector<std::string> keys = {}, std::string value = {}) {
  StoreQuery query;
  query.op = op;
  query.keys = std::move(keys);
  query.value = std::move(value);
  return query;
}

// The one answer a request gets at once.
StoreAnswer once(RendezvousStore& s, const StoreQuery& query, uint64_t id = 1,
                 const std::string& from = "a:learner/0", int64_t now = 0) {
  const auto out = s.apply(from, id, s.generation(), query, now);
  EXPECT_EQ(out.size(), 1u);
  if (out.empty()) return {};
  EXPECT_EQ(out[0].to, from);
  EXPECT_EQ(out[0].answer.id, id);
  return out[0].answer;
}

TEST(RendezvousStore, AnswersEveryOperationAsC10dsTcpStoreDoes) {
  RendezvousStore s;
  s.begin_generation(3);
  EXPECT_TRUE(once(s, q(Op::SET, {"a"}, "1")).ok);
  const StoreAnswer got = once(s, q(Op::GET, {"a"}));
  EXPECT_TRUE(got.ok);
  EXPECT_EQ(got.value, "1");
  // add: a decimal counter, created at 0.
  EXPECT_EQ(once(s,
                 [] {
                   auto a = q(Op::ADD, {"n"});
                   a.delta = 5;
                   return a;
                 }())
                .number,
            5);
  EXPECT_EQ(once(s,
                 [] {
                   auto a = q(Op::ADD, {"n"});
                   a.delta = -2;
                   return a;
                 }())
                .number,
            3);
  EXPECT_EQ(once(s, q(Op::GET, {"n"})).value, "3");
  // add to a value that is no integer: an error, the value kept.
  EXPECT_TRUE(once(s, q(Op::SET, {"t"}, "x7")).ok);
  const StoreAnswer bad = once(s, [] {
    auto a = q(Op::ADD, {"t"});
    a.delta = 1;
    return a;
  }());
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("no integer"), std::string::npos) << bad.error;
  // compareSet: set when it holds `expected` (absent: expected empty), else the value held.
  StoreQuery cas = q(Op::COMPARE_SET, {"c"}, "new");
  cas.expected = "old";
  EXPECT_EQ(once(s, cas).value, "old");  // absent, expected given: not set
  EXPECT_FALSE(once(s, q(Op::CHECK, {"c"})).number);
  cas.expected = "";
  EXPECT_EQ(once(s, cas).value, "new");  // absent, expected empty: set
  cas.value = "newer";
  cas.expected = "wrong";
  EXPECT_EQ(once(s, cas).value, "new");  // held another value: not set
  cas.expected = "new";
  EXPECT_EQ(once(s, cas).value, "newer");
  // check, getNumKeys, deleteKey.
  EXPECT_EQ(once(s, q(Op::CHECK, {"a", "n", "c"})).number, 1);
  EXPECT_EQ(once(s, q(Op::CHECK, {"a", "zz"})).number, 0);
  EXPECT_EQ(once(s, q(Op::NUM_KEYS)).number, 4);
  EXPECT_EQ(once(s, q(Op::DELETE_KEY, {"a"})).number, 1);
  EXPECT_EQ(once(s, q(Op::DELETE_KEY, {"a"})).number, 0);
  EXPECT_EQ(once(s, q(Op::NUM_KEYS)).number, 3);
  // Keys are bytes: a NUL inside one is kept.
  const std::string binary("k\0ey", 4);
  EXPECT_TRUE(once(s, q(Op::SET, {binary}, std::string("v\0", 2))).ok);
  EXPECT_EQ(once(s, q(Op::GET, {binary})).value, std::string("v\0", 2));
}

TEST(RendezvousStore, AWaitIsAnsweredWhenItsKeysArriveOrItsDeadlinePasses) {
  RendezvousStore s;
  s.begin_generation(1);
  StoreQuery wait = q(Op::WAIT, {"x", "y"});
  wait.timeout_ms = 1000;
  EXPECT_TRUE(s.apply("a:learner/1", 7, 1, wait, 100).empty());
  StoreQuery get = q(Op::GET, {"y"});
  get.timeout_ms = 500;
  EXPECT_TRUE(s.apply("a:learner/2", 8, 1, get, 100).empty());
  EXPECT_EQ(s.waiters(), 2u);
  EXPECT_TRUE(s.expire(599).empty());
  // "x" alone wakes nobody; "y" wakes both, each with its own id.
  auto out = s.apply("a:learner/0", 1, 1, q(Op::SET, {"x"}, "1"), 200);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, "a:learner/0");
  out = s.apply("a:learner/0", 2, 1, q(Op::SET, {"y"}, "2"), 300);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].to, "a:learner/1");
  EXPECT_EQ(out[1].answer.id, 7u);
  EXPECT_TRUE(out[1].answer.ok);
  EXPECT_EQ(out[2].to, "a:learner/2");
  EXPECT_EQ(out[2].answer.id, 8u);
  EXPECT_EQ(out[2].answer.value, "2");
  EXPECT_EQ(s.waiters(), 0u);

  // A key that never comes: the wait ends at its deadline, timed out, naming the key.
  get.keys = {"never"};
  EXPECT_TRUE(s.apply("a:learner/1", 9, 1, get, 1000).empty());
  EXPECT_TRUE(s.expire(1499).empty());
  out = s.expire(1500);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].answer.ok);
  EXPECT_TRUE(out[0].answer.timed_out);
  EXPECT_NE(out[0].answer.error.find("\"never\""), std::string::npos) << out[0].answer.error;
}

TEST(RendezvousStore, NoWaitOutlastsTheCapNotEvenOneWithoutATimeout) {
  RendezvousLimits limits;
  limits.max_timeout_ms = 2000;
  RendezvousStore s(limits);
  s.begin_generation(1);
  StoreQuery forever = q(Op::WAIT, {"k"});
  forever.timeout_ms = 0;  // c10d's "no timeout"
  StoreQuery long_one = forever;
  long_one.timeout_ms = 1'000'000;
  EXPECT_TRUE(s.apply("a:learner/0", 1, 1, forever, 0).empty());
  EXPECT_TRUE(s.apply("a:learner/1", 2, 1, long_one, 0).empty());
  EXPECT_TRUE(s.expire(1999).empty());
  EXPECT_EQ(s.expire(2000).size(), 2u);
}

TEST(RendezvousStore, ANewGenerationAnswersTheOldWaitersAndDropsTheOldKeys) {
  RendezvousStore s;
  s.begin_generation(4);
  EXPECT_TRUE(once(s, q(Op::SET, {"addr/0"}, "10.0.0.1:1234")).ok);
  StoreQuery get = q(Op::GET, {"addr/1"});
  get.timeout_ms = 60000;
  EXPECT_TRUE(s.apply("a:learner/0", 5, 4, get, 0).empty());
  EXPECT_TRUE(s.begin_generation(4).empty()) << "the same generation changes nothing";
  auto out = s.begin_generation(5);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, "a:learner/0");
  EXPECT_EQ(out[0].answer.id, 5u);
  EXPECT_FALSE(out[0].answer.ok);
  EXPECT_FALSE(out[0].answer.timed_out);
  EXPECT_NE(out[0].answer.error.find("generation 4 ended"), std::string::npos);
  EXPECT_EQ(s.keys(), 0u);
  EXPECT_EQ(s.waiters(), 0u);
  // A request of the old generation is refused at once, and reads nothing.
  out = s.apply("a:learner/1", 6, 4, q(Op::GET, {"addr/0"}), 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].answer.ok);
  EXPECT_NE(out[0].answer.error.find("not the current one (5)"), std::string::npos)
      << out[0].answer.error;
}

TEST(RendezvousStore, LimitsAreAnsweredWithAnErrorNotGrowth) {
  RendezvousLimits limits;
  limits.max_keys = 2;
  limits.max_bytes = 100;
  limits.max_waiters_per_peer = 1;
  RendezvousStore s(limits);
  s.begin_generation(1);
  EXPECT_TRUE(once(s, q(Op::SET, {"a"}, "1")).ok);
  EXPECT_TRUE(once(s, q(Op::SET, {"b"}, "1")).ok);
  EXPECT_FALSE(once(s, q(Op::SET, {"c"}, "1")).ok);
  EXPECT_TRUE(once(s, q(Op::SET, {"a"}, "2")).ok) << "replacing a key adds none";
  EXPECT_FALSE(once(s, q(Op::SET, {"a"}, std::string(200, 'x'))).ok);
  EXPECT_EQ(once(s, q(Op::GET, {"a"})).value, "2");
  StoreQuery wait = q(Op::WAIT, {"z"});
  EXPECT_TRUE(s.apply("a:learner/0", 1, 1, wait, 0).empty());
  const auto second = s.apply("a:learner/0", 2, 1, wait, 0);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_FALSE(second[0].answer.ok);
  EXPECT_TRUE(s.apply("a:learner/1", 3, 1, wait, 0).empty()) << "the limit is per peer";
}

TEST(RendezvousStore, RequestsAndAnswersSurviveTheWireAndBadOnesAreRefused) {
  StoreQuery query = q(Op::COMPARE_SET, {std::string("k\0", 2)}, "new");
  query.expected = "old";
  query.delta = -3;
  query.timeout_ms = 1234;
  capnp::MallocMessageBuilder b;
  auto request = b.initRoot<wire::StoreRequest>();
  write_store_request(42, 9, query, request);
  const StoreQuery back = read_store_request(request.asReader());
  EXPECT_EQ(request.getId(), 42u);
  EXPECT_EQ(request.getGeneration(), 9u);
  EXPECT_EQ(back.op, Op::COMPARE_SET);
  EXPECT_EQ(back.keys, query.keys);
  EXPECT_EQ(back.value, "new");
  EXPECT_EQ(back.expected, "old");
  EXPECT_EQ(back.delta, -3);
  EXPECT_EQ(back.timeout_ms, 1234);

  StoreAnswer answer;
  answer.id = 42;
  answer.ok = false;
  answer.timed_out = true;
  answer.error = "timed out";
  answer.value = std::string("v\0w", 3);
  answer.number = 7;
  capnp::MallocMessageBuilder rb;
  auto reply = rb.initRoot<wire::StoreReply>();
  write_store_reply(answer, reply);
  const StoreAnswer a = read_store_reply(reply.asReader());
  EXPECT_EQ(a.id, 42u);
  EXPECT_FALSE(a.ok);
  EXPECT_TRUE(a.timed_out);
  EXPECT_EQ(a.error, "timed out");
  EXPECT_EQ(a.value, answer.value);
  EXPECT_EQ(a.number, 7);

  // No key for an operation that needs one; several for a one-key operation.
  capnp::MallocMessageBuilder eb;
  auto empty = eb.initRoot<wire::StoreRequest>();
  empty.setOp(Op::GET);
  EXPECT_THROW(read_store_request(empty.asReader()), std::invalid_argument);
  empty.setOp(Op::NUM_KEYS);
  EXPECT_NO_THROW(read_store_request(empty.asReader()));
  auto keys = empty.initKeys(2);
  keys.set(0, kj::StringPtr("a").asBytes());
  keys.set(1, kj::StringPtr("b").asBytes());
  empty.setOp(Op::SET);
  EXPECT_THROW(read_store_request(empty.asReader()), std::invalid_argument);
  empty.setOp(Op::WAIT);
  EXPECT_NO_THROW(read_store_request(empty.asReader()));
}

TEST(Interfaces, TheLoopbackAddressesAreOnTheLoopbackInterface) {
  const std::string lo = interface_of("127.0.0.1");
  EXPECT_FALSE(lo.empty());
  EXPECT_EQ(interface_of("127.0.0.2"), lo) << "127.0.0.0/8 is all loopback";
  EXPECT_EQ(interface_of("localhost"), lo);
  EXPECT_EQ(interface_of("*"), "");
  EXPECT_EQ(interface_of("no-such-host.invalid"), "");
  EXPECT_EQ(interface_of("192.0.2.1"), "") << "TEST-NET-1 is on no interface of this host";
}

}  // namespace
}  // namespace saccade::control
