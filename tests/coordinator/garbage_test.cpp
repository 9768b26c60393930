// Garbage, oversized, multi-part, foreign-job and misaddressed frames on every
// socket of the runtime: the coordinator's ROUTER, an agent's and an actor's
// DEALER (reached through a fake coordinator). Each is dropped, the process
// lives on and still obeys the next valid message.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "control/control.h"
#include "tests/coordinator/fake_coordinator.h"
#include "tests/coordinator/harness.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kSaccade = build_path("saccade");
const std::string kActor = build_path("tests/coordinator/saccade_test_actor");

constexpr int kLimit = 65536;  // cluster.max_message_bytes of these jobs

// Sends every kind of bad frame through `send` (which prefixes routing parts).
void send_garbage(const std::function<void(std::vector<zmq::message_t>)>& send) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 50; ++i) {
    std::vector<uint64_t> words(1 + rng() % 40);
    for (auto& w : words) w = rng();
    zmq::message_t m(words.data(), words.size() * 8 - (i % 3));  // some not whole words
    std::vector<zmq::message_t> parts;
    parts.push_back(std::move(m));
    send(std::move(parts));
  }
  std::vector<zmq::message_t> big;
  big.emplace_back(std::string(kLimit + 8, 'x'));
  send(std::move(big));
  std::vector<zmq::message_t> multi;
  multi.push_back(envelope("rt-test", wire::Role::COORDINATOR, 0,
                           [](wire::Envelope::Builder e) { e.getBody().initHeartbeat(); }));
  multi.emplace_back(std::string("trailing junk"));
  send(std::move(multi));
  std::vector<zmq::message_t> foreign;
  foreign.push_back(envelope(
      "other-job", wire::Role::COORDINATOR, 0,
      [](wire::Envelope::Builder e) { e.getBody().initShutdown().setReason("not yours"); }));
  send(std::move(foreign));
  std::vector<zmq::message_t> impostor;  // a "shutdown" from a peer that is not the coordinator
  impostor.push_back(envelope("rt-test", wire::Role::LEARNER, 0, [](wire::Envelope::Builder e) {
    e.getBody().initShutdown().setReason("impostor");
  }));
  send(std::move(impostor));
}

class Garbage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { adopt_orphans(); }
  void TearDown() override {
    std::vector<pid_t> left;
    EXPECT_TRUE(wait_until(
        [&] {
          while (waitpid(-1, nullptr, WNOHANG) > 0) {
          }
          return (left = descendants()).empty();
        },
        5s))
        << left.size() << " processes outlived the test";
  }
  fs::path config(int port) {
    TestJob job;
    job.port = port;
    job.steps = 60;
    job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
    job.cluster_extra = fmt::format("max_message_bytes = {}", kLimit);
    job.small_frames = true;
    const fs::path file = dir.path() / "job.toml";
    std::ofstream(file) << job_toml(job, dir.path() / "work");
    return file;
  }
  TempDir dir;
};

TEST_F(Garbage, CoordinatorDropsBadFramesAndTheJobFinishes) {
  const int port = free_port();
  const fs::path cfg = config(port);
  Child coord({kSaccade, "coordinator", cfg.string(), "--bind", "127.0.0.1"}, dir.path() / "c.log");
  Child agent({kSaccade, "agent", "--coordinator", fmt::format("127.0.0.1:{}", port), "--node",
               "n0", "--config", cfg.string(), "--actor-binary", kActor},
              dir.path() / "a.log");
  ASSERT_TRUE(wait_until(
      [&] {
        return run_process({kSaccade, "status", "--config", cfg.string(), "--timeout-ms",
                            std::to_string(scaled(500ms).count())})
                   .exit_code == 0;
      },
      10s));
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(fmt::format("tcp://127.0.0.1:{}", port));
  auto via_dealer = [&](std::vector<zmq::message_t> parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      dealer.send(parts[i],
                  i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  // Well-formed, but from identities that are not who they claim to be.
  std::vector<zmq::message_t> spoof;
  spoof.push_back(envelope("rt-test", wire::Role::DATA, 0, [](wire::Envelope::Builder e) {
    e.getBody().initHeartbeat().setStep(1 << 30);
  }));
  via_dealer(std::move(spoof));
  std::vector<zmq::message_t> unknown;
  unknown.push_back(envelope("rt-test", wire::Role::DATA, 99,
                             [](wire::Envelope::Builder e) { e.getBody().initHeartbeat(); }));
  via_dealer(std::move(unknown));
  send_garbage(via_dealer);  // last: its oversized frame makes the coordinator hang up
  // Raw bytes on the TCP port: not even a ZeroMQ handshake.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string junk(4096, '\xff');
  (void)!write(fd, junk.data(), junk.size());
  close(fd);

  EXPECT_EQ(coord.wait(30s), 0) << coord.log();
  EXPECT_EQ(agent.wait(10s), 0) << agent.log();
  const std::string log = coord.log();
  EXPECT_NE(log.find("dropped a message"), std::string::npos);
  EXPECT_NE(log.find("no actor data 99"), std::string::npos) << log;
  EXPECT_NE(log.find("is not that actor's"), std::string::npos) << log;
}

TEST_F(Garbage, AgentDropsBadFramesAndStillObeysTheCoordinator) {
  const int port = free_port();
  const fs::path cfg = config(port);
  FakeCoordinator fake(port, kLimit);
  Child agent({kSaccade, "agent", "--coordinator", fmt::format("127.0.0.1:{}", port), "--node",
               "n0", "--config", cfg.string(), "--actor-binary", kActor},
              dir.path() / "a.log");
  auto first = fake.next(10s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first, "n:n0");
  EXPECT_EQ(first->second, wire::Envelope::Body::REGISTER_NODE);
  send_garbage([&](std::vector<zmq::message_t> p) { fake.send("n:n0", std::move(p)); });
  fake.drain_for(300ms);
  EXPECT_FALSE(agent.poll()) << agent.log();
  auto again = fake.next(5s);  // it keeps registering: alive and in step
  ASSERT_TRUE(again) << agent.log();
  EXPECT_EQ(again->second, wire::Envelope::Body::REGISTER_NODE);
  std::vector<zmq::message_t> stop;
  stop.push_back(envelope("rt-test", wire::Role::COORDINATOR, 0, [](wire::Envelope::Builder e) {
    e.getBody().initShutdown().setReason("test over");
  }));
  fake.send("n:n0", std::move(stop));
  EXPECT_EQ(agent.wait(5s), 0) << agent.log();
  EXPECT_NE(agent.log().find("dropped a message"), std::string::npos);
}

TEST_F(Garbage, ActorDropsBadFramesAndStillDrainsOnShutdown) {
  const int port = free_port();
  const fs::path cfg = config(port);
  FakeCoordinator fake(port, kLimit);
  Child actor({kActor, "actor", "--role", "data", "--rank", "0", "--node", "n0", "--coordinator",
               fmt::format("127.0.0.1:{}", port), "--config", cfg.string()},
              dir.path() / "actor.log");
  auto first = fake.next(10s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first, "a:data/0");
  EXPECT_EQ(first->second, wire::Envelope::Body::HEARTBEAT);
  send_garbage([&](std::vector<zmq::message_t> p) { fake.send("a:data/0", std::move(p)); });
  std::vector<zmq::message_t> rendezvous;  // addressed right, but no step to resume from
  rendezvous.push_back(
      envelope("rt-test", wire::Role::COORDINATOR, 0, [](wire::Envelope::Builder e) {
        auto r = e.getBody().initRendezvous();
        r.setWorldSize(1);
        r.setRank(0);
        r.setResumeFromStep(-7);
        r.setCollectiveTimeoutMs(0);
      }));
  fake.send("a:data/0", std::move(rendezvous));
  fake.drain_for(300ms);
  EXPECT_FALSE(actor.poll()) << actor.log();
  auto beat = fake.next(5s);
  ASSERT_TRUE(beat);
  EXPECT_EQ(beat->second, wire::Envelope::Body::HEARTBEAT);
  std::vector<zmq::message_t> stop;
  stop.push_back(envelope("rt-test", wire::Role::COORDINATOR, 0, [](wire::Envelope::Builder e) {
    e.getBody().initShutdown().setReason("test over");
  }));
  fake.send("a:data/0", std::move(stop));
  EXPECT_EQ(actor.wait(5s), 0) << actor.log();
  const std::string log = actor.log();
  EXPECT_NE(log.find("dropped a message"), std::string::npos) << log;
  EXPECT_EQ(log.find("impostor"), std::string::npos) << "a non-coordinator's shutdown was obeyed";
  EXPECT_NE(log.find("rendezvous with resume step -7 and collective timeout 0 ms"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("rendezvous generation"), std::string::npos) << "a bad rendezvous was kept";
}

}  // namespace
}  // namespace saccade::testing
