// Well-formed envelopes with odd field values (tests/coordinator/odd_envelopes.h), thousands
// of them, from peers that are who they claim to be, to the coordinator, an agent and
// actors: each process lives on, keeps serving, and ends cleanly when told.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <random>

#include "common/file_bytes.h"
#include "control/control.h"
#include "tests/coordinator/fake_coordinator.h"
#include "tests/coordinator/odd_envelopes.h"
#include "tests/coordinator/runtime_fixture.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {
namespace {

using namespace std::chrono_literals;
using Body = wire::Envelope::Body;
namespace fs = std::filesystem;

constexpr int kLimit = 65536;  // cluster.max_message_bytes of these jobs
// The fake actors' pid: the test's own, which is what its envelope writers put in the header.
const uint32_t kFakePid = static_cast<uint32_t>(getpid());

// A peer of the coordinator played by the test: a DEALER with the routing id the
// coordinator expects of (role, rank, node). It reads and drops what it is sent.
struct FakePeer {
  FakePeer(zmq::context_t& context, int port, wire::SenderInfo who)
      : writer(who), socket(context, zmq::socket_type::dealer) {
    const std::string id = who.role == wire::Role::AGENT ? control::agent_identity(who.node)
                           : who.role == wire::Role::CLIENT
                               ? std::string("odd-client")
                               : control::actor_identity(who.role, who.rank);
    socket.set(zmq::sockopt::routing_id, id);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, 2000);
    socket.connect(fmt::format("tcp://127.0.0.1:{}", port));
  }
  void send(zmq::message_t m) { (void)socket.send(m, zmq::send_flags::none); }
  void send(const std::function<void(wire::Envelope::Builder)>& fill, uint64_t generation = 0) {
    send(writer.make(generation, fill));
  }
  // Drops what arrived; returns the kinds of the frames that opened.
  std::vector<Body::Which> drain() {
    std::vector<Body::Which> kinds;
    zmq::message_t frame;
    while (socket.recv(frame, zmq::recv_flags::dontwait)) {
      wire::Received r = wire::open_frame(std::move(frame), {"rt-test", kLimit});
      if (r.status == wire::RecvStatus::kOk) kinds.push_back(r.message->kind());
    }
    return kinds;
  }
  control::EnvelopeWriter writer;
  zmq::socket_t socket;
};

class OddFields : public RuntimeFixture {
 protected:
  void SetUp() override { actor_binary_ = build_path("tests/coordinator/saccade_test_actor"); }
};

// The coordinator of a running job gets odd envelopes from an agent, a data actor, a
// learner and a client that pass its identity checks. It drops what it must, keeps
// answering status, and drains and exits as a coordinator does (no crash, no hang).
TEST_F(OddFields, TheCoordinatorKeepsServing) {
  TestJob job;
  job.port = free_port();
  job.steps = 1000000;            // the job runs through the whole barrage
  job.max_restarts = 1000000;     // odd exit events restart the fake actors, never fail the job
  job.status_linger_ms = 600000;  // and if odd events end it, status is still served
  job.heartbeat_misses = 200;     // 10 s: the fake peers beat between bursts
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 0",
               "name = \"n1\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  job.cluster_extra = fmt::format("max_message_bytes = {}", kLimit);
  job.small_frames = true;
  const fs::path cfg = write_config(job);
  Child& coord = coordinator(cfg);
  agent(cfg, job.port, "n0");

  // n1 is the test's: its agent registers and says its actors started.
  zmq::context_t context;
  FakePeer node(context, job.port, {"rt-test", wire::Role::AGENT, 0, "n1"});
  node.send([](wire::Envelope::Builder e) {
    auto r = e.getBody().initRegisterNode();
    r.setNodeName("n1");
    r.setHost("127.0.0.1");
    r.setCores(2);
  });
  const auto started = [&](wire::Role role, int rank) {
    node.send([&](wire::Envelope::Builder e) {
      auto ev = e.getBody().initActorEvent();
      ev.setRole(role);
      ev.setRank(rank);
      ev.setPid(kFakePid);
      ev.setState(wire::ActorState::STARTING);
    });
  };
  FakePeer data(context, job.port, {"rt-test", wire::Role::DATA, 1, "n1"});
  FakePeer learner(context, job.port, {"rt-test", wire::Role::LEARNER, 0, "n1"});
  FakePeer client(context, job.port, {"rt-test", wire::Role::CLIENT, 0, ""});
  const auto beat = [&] {
    node.send([](wire::Envelope::Builder e) { e.getBody().initHeartbeat(); });
    for (FakePeer* actor : {&data, &learner})
      actor->send([](wire::Envelope::Builder e) {
        e.getBody().initHeartbeat().setState(wire::ActorState::RUNNING);
      });
  };
  ASSERT_TRUE(wait_until(
      [&] {
        started(wire::Role::DATA, 1);
        started(wire::Role::LEARNER, 0);
        beat();
        node.drain();
        const auto s = status(cfg);
        return s && all_running(*s);
      },
      30s))
      << "the job never ran with the test's node";

  struct Odd {
    FakePeer& peer;
    OddEnvelopes envelopes;
  };
  std::vector<Odd> odd;
  uint64_t seed = 1;
  for (FakePeer* peer : {&node, &data, &learner, &client})
    odd.push_back({*peer, OddEnvelopes(seed++, peer->writer.sender(), kFakePid)});
  // First without actor events (an odd one may drain the job, as a real one would: that
  // comes last), then every kind.
  std::mt19937_64 generations(7);
  for (int round = 0; round < 2; ++round) {
    const std::vector<Body::Which> except =
        round == 0 ? std::vector<Body::Which>{Body::ACTOR_EVENT} : std::vector<Body::Which>{};
    for (int i = 0; i < (round == 0 ? 2000 : 500); ++i) {
      for (Odd& o : odd) o.peer.send(o.envelopes.make(generations() % 3, except));
      if (i % 50 == 0) {
        beat();
        for (Odd& o : odd) o.peer.drain();
        ASSERT_FALSE(coord.poll()) << "the coordinator ended after " << i << " rounds of "
                                   << odd.size() << " odd envelopes";
      }
    }
  }
  EXPECT_TRUE(status(cfg)) << "no status after the odd envelopes";
  coord.signal(SIGTERM);
  const std::optional<int> code = coord.wait(60s);
  ASSERT_TRUE(code) << "the coordinator did not end after SIGTERM";
  EXPECT_TRUE(*code == 0 || *code == 3 || *code == 4) << "exit code " << *code;
  EXPECT_NE(coord.log().find("dropped a message"), std::string::npos);
}

// An agent registered with a (fake) coordinator gets odd envelopes from it, among them
// orders to start actors of odd roles, ranks, devices and endpoints. It lives on,
// registers again when asked, and on Shutdown stops every actor it started and exits 0.
TEST_F(OddFields, AnAgentLivesOnAndStopsCleanly) {
  TestJob job;
  job.port = free_port();
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  job.cluster_extra = fmt::format("max_message_bytes = {}", kLimit);
  job.small_frames = true;
  const fs::path cfg = write_config(job);
  const std::string toml = read_file_bytes(cfg);
  FakeCoordinator fake(job.port, kLimit);
  Child& node = agent(cfg, job.port, "n0");
  ASSERT_TRUE(fake.next(10s));
  fake.send("n:n0", [&](wire::Envelope::Builder e) {  // registered: START orders are obeyed
    auto a = e.getBody().initAssignRoles();
    a.setNodeName("n0");
    a.setConfigToml(toml);
  });
  OddEnvelopes odd(11, {"rt-test", wire::Role::COORDINATOR, 0, "n0"}, 0);
  for (int i = 0; i < 1500; ++i) {
    std::vector<zmq::message_t> parts;
    parts.push_back(odd.make(0, {Body::SHUTDOWN, Body::REFUSAL}));  // those stop it, rightly
    fake.send("n:n0", std::move(parts));
    if (i % 50 == 0) fake.drain_for(20ms);
  }
  fake.drain_for(500ms);
  ASSERT_FALSE(node.poll()) << "the agent ended";
  fake.send("n:n0", [](wire::Envelope::Builder e) { e.getBody().initAck().setOk(false); });
  bool registered = false;
  for (auto deadline = std::chrono::steady_clock::now() + scaled(10s);
       !registered && std::chrono::steady_clock::now() < deadline;) {
    auto m = fake.next(1s);
    registered = m && m->first == "n:n0" && m->second == Body::REGISTER_NODE;
  }
  EXPECT_TRUE(registered) << "the agent did not register again when asked";
  fake.send("n:n0",
            [](wire::Envelope::Builder e) { e.getBody().initShutdown().setReason("test over"); });
  const auto until = std::chrono::steady_clock::now() + scaled(30s);
  while (!node.poll() && std::chrono::steady_clock::now() < until) fake.drain_for(100ms);
  EXPECT_EQ(node.wait(1s), 0);
  EXPECT_NE(node.log().find("dropped a message"), std::string::npos);
}

// A data actor and a learner (the runtime with the test bodies) get odd envelopes from
// their (fake) coordinator. Each lives on, keeps beating, and drains on Shutdown.
TEST_F(OddFields, ActorsLiveOnAndDrainOnShutdown) {
  TestJob job;
  job.port = free_port();
  job.steps = 1000000;  // an odd Rendezvous may start the learner: it must not finish
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  job.cluster_extra = fmt::format("max_message_bytes = {}", kLimit);
  job.small_frames = true;
  const fs::path cfg = write_config(job);
  FakeCoordinator fake(job.port, kLimit);
  uint64_t seed = 21;
  for (const char* role : {"data", "learner"}) {
    SCOPED_TRACE(role);
    const std::string id = fmt::format("a:{}/0", role);
    Child& actor = start(
        role, {actor_binary_, "actor", "--role", role, "--rank", "0", "--node", "n0",
               "--coordinator", fmt::format("127.0.0.1:{}", job.port), "--config", cfg.string()});
    auto first = fake.next(10s);
    ASSERT_TRUE(first);
    ASSERT_EQ(first->first, id);
    // What a coordinator does for an actor in between: it beats, and commits the
    // checkpoints learner uploads. Returns whether the actor beat within `d`.
    const auto serve = [&](std::chrono::milliseconds d) {
      bool beat = false;
      for (const auto until = std::chrono::steady_clock::now() + scaled(d);
           std::chrono::steady_clock::now() < until;) {
        fake.send(id, [](wire::Envelope::Builder e) { e.getBody().initHeartbeat(); });
        auto m = fake.next_message(20ms);
        if (!m || m->first != id) continue;
        beat = beat || m->second.kind() == Body::HEARTBEAT;
        if (m->second.kind() != Body::CHECKPOINT_COMMITTED) continue;
        const auto upload = m->second.envelope().getBody().getCheckpointCommitted();
        fake.send(id, [&](wire::Envelope::Builder e) {
          auto c = e.getBody().initCheckpointCommitted();
          c.setStep(upload.getStep());
          c.setBytes(upload.getBytes());
        });
      }
      return beat;
    };
    OddEnvelopes odd(seed++, {"rt-test", wire::Role::COORDINATOR, 0, "n0"}, 0);
    for (int i = 0; i < 1500; ++i) {
      std::vector<zmq::message_t> parts;
      parts.push_back(odd.make(i % 2, {Body::SHUTDOWN}));
      fake.send(id, std::move(parts));
      if (i % 50 == 0) serve(20ms);
    }
    EXPECT_TRUE(serve(1s)) << "no heartbeat after the odd envelopes";
    ASSERT_FALSE(actor.poll()) << "the " << role << " ended";
    fake.send(id,
              [](wire::Envelope::Builder e) { e.getBody().initShutdown().setReason("test over"); });
    // The learner drains with a final checkpoint, committed by serve().
    for (const auto until = std::chrono::steady_clock::now() + scaled(30s);
         !actor.poll() && std::chrono::steady_clock::now() < until;)
      serve(100ms);
    EXPECT_EQ(actor.wait(1s), 0);
    EXPECT_EQ(actor.log().find("in time"), std::string::npos) << "a checkpoint was not answered";
  }
}

}  // namespace
}  // namespace saccade::testing
