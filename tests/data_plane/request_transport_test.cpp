// The request/response transport both planes use (workers/runtime/request_client.h,
// request_server.h), with a protocol of its own over real loopback sockets:
// answers reach the request they belong to, a silent peer's requests move to
// another, a malformed answer is asked for again, and clear() frees the peers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "workers/runtime/request_client.h"
#include "workers/runtime/request_server.h"

namespace saccade::runtime {
namespace {

using namespace std::chrono_literals;
using Body = wire::Envelope::Body;
constexpr const char* kJob = "transport-test";

// Answers Credit{n} with Credit{n + 1}; Credit{0} is answered with a Heartbeat (malformed
// for the protocol below) the first time it is seen.
class EchoServer {
 public:
  EchoServer() {
    RequestServerOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.sender = {kJob, wire::Role::DATA, 0, "n0"};
    o.expect = {kJob, 1 << 20};
    server_.emplace(o);
    thread_ = std::thread([this] {
      server_->serve(
          [this] { return stop_.load(); },
          [this](Exchange& ex) {
            if (ex.message().kind() != Body::CREDIT) return ex.refuse("not a Credit");
            const uint64_t n = ex.envelope().getBody().getCredit().getBatches();
            ++served_;
            if (n == 0 && !garbled_once_) {
              garbled_once_ = true;
              ex.reply([](wire::Envelope::Builder out) { out.getBody().initHeartbeat(); });
              return;
            }
            ex.reply([&](wire::Envelope::Builder out) {
              out.getBody().initCredit().setBatches(static_cast<uint32_t>(n + 1));
            });
          });
    });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
  }
  std::string endpoint() const { return server_->endpoint(); }
  int served() const { return served_.load(); }

 private:
  std::optional<RequestServer> server_;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  bool garbled_once_ = false;  // the server thread's only
  std::thread thread_;
};

// Request id n asks for n + 1 (ids are submitted from 0: id 0 gets the garbled answer).
class EchoProtocol : public RequestProtocol {
 public:
  bool send(uint64_t id, size_t peer, PeerLink& link) override {
    sent_to[id].push_back(peer);
    return link.send([&](wire::Envelope::Builder out) {
      out.getBody().initCredit().setBatches(static_cast<uint32_t>(id));
    });
  }
  Answer accept(size_t, wire::Message&& m) override {
    if (m.kind() == Body::HEARTBEAT)
      return {Answer::Kind::kRetry, 0, "came back malformed", "a Heartbeat"};
    if (m.kind() != Body::CREDIT) return {Answer::Kind::kIgnored, 0, "", "unexpected"};
    const uint64_t id = m.envelope().getBody().getCredit().getBatches() - 1;
    if (answered.count(id)) return {};  // a duplicate
    answered.insert(id);
    return {Answer::Kind::kDone, id, "", ""};
  }
  std::map<uint64_t, std::vector<size_t>> sent_to;
  std::set<uint64_t> answered;
};

RequestClientOptions options(std::vector<std::string> endpoints) {
  RequestClientOptions o;
  o.endpoints = std::move(endpoints);
  o.queue_depth = 2;
  o.request_timeout = 300ms;
  o.sender = {kJob, wire::Role::LEARNER, 0, "n0"};
  o.expect = {kJob, 1 << 20};
  o.peer_kind = "echo server";
  return o;
}

TEST(RequestTransport, EveryRequestIsAnsweredOnceAndASilentPeersRequestsMove) {
  EchoServer live;
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);  // takes requests, never answers
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  EchoProtocol protocol;
  RequestClient client(options({silent.get(zmq::sockopt::last_endpoint), live.endpoint()}),
                       protocol);
  ASSERT_TRUE(client.wait_connected(5s, [] { return false; }));
  for (uint64_t id = 0; id < 8; ++id) client.submit(id);
  const auto deadline = std::chrono::steady_clock::now() + 30s;  // a broken client fails, not hangs
  ASSERT_TRUE(client.run_until([&] { return protocol.answered.size() == 8; },
                               [&] { return std::chrono::steady_clock::now() > deadline; }));
  // Each answered once; the silent peer got requests (both were connected) that
  // went to the live one after the timeout; the garbled answer was asked for again.
  EXPECT_EQ(protocol.answered.size(), 8u);
  bool silent_got_some = false;
  for (const auto& [id, peers] : protocol.sent_to) {
    EXPECT_EQ(peers.back(), 1u) << "request " << id << " was answered by the live peer";
    silent_got_some = silent_got_some || peers.front() == 0;
  }
  EXPECT_TRUE(silent_got_some);
  EXPECT_GE(protocol.sent_to[0].size(), 2u);  // garbled once, sent again
  EXPECT_GE(client.resent(), 2u);
  EXPECT_GE(live.served(), 9);  // every request, and request 0 twice
}

TEST(RequestTransport, StoppingReturnsAndClearFreesThePeers) {
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  EchoProtocol protocol;
  RequestClientOptions o = options({silent.get(zmq::sockopt::last_endpoint)});
  o.queue_depth = 1;
  o.request_timeout = 60s;
  RequestClient client(o, protocol);
  ASSERT_TRUE(client.wait_connected(5s, [] { return false; }));
  client.submit(1);
  int asked = 0;
  EXPECT_FALSE(client.run_until([] { return false; }, [&] { return ++asked > 3; }));
  EXPECT_EQ(protocol.sent_to[1].size(), 1u);
  // Queue depth 1 and request 1 unanswered: request 2 waits until clear() drops 1.
  client.clear();
  client.submit(2);
  asked = 0;
  client.run_until([] { return false; }, [&] { return ++asked > 3; });
  EXPECT_EQ(protocol.sent_to[2].size(), 1u);
  EXPECT_THROW(client.submit(2), std::logic_error);
}

}  // namespace
}  // namespace saccade::runtime
