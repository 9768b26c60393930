// An actor's link to its coordinator, driven by a fake coordinator: what the body
// posts (metrics, rendezvous and checkpoint requests) reaches the coordinator even
// while the socket's queue is full of a checkpoint upload the coordinator refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <thread>

#include "tests/coordinator/fake_coordinator.h"
#include "tests/coordinator/harness.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int kLimit = 8192;  // cluster.max_message_bytes: 4 KiB checkpoint chunks
// 8,000 chunks: far more than ZeroMQ's send queue (1,000 messages) and loopback's TCP
// buffers hold, so an upload the coordinator does not read fills the actor's socket.
constexpr size_t kCheckpointBytes = 8000 * 4096;

TEST(ActorLink, MessagesPostedWhileARefusedUploadFillsTheSocketStillGoOut) {
  TempDir dir;
  const int port = free_port();
  TestJob job;
  job.port = port;
  job.steps = 200;
  job.checkpoint_every = 20;
  job.heartbeat_misses = 40;  // 2 s: the fake coordinator beats every 50 ms
  job.stall_timeout_s = 10;
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  job.cluster_extra = fmt::format("max_message_bytes = {}", kLimit);
  job.small_frames = true;
  job.batch_size = 1;  // one image per 8 KB frame
  const fs::path config = dir.path() / "job.toml";
  std::ofstream(config) << job_toml(job, dir.path() / "work");
  FakeCoordinator fake(port, kLimit);
  Child learner({build_path("tests/coordinator/saccade_test_actor"), "actor", "--role", "learner",
                 "--rank", "0", "--node", "n0", "--coordinator", fmt::format("127.0.0.1:{}", port),
                 "--config", config.string()},
                dir.path() / "learner.log",
                {fmt::format("{}={}", kCheckpointBytesVariable, kCheckpointBytes),
                 "SACCADE_TEST_STEP_MS=10"});
  const std::string id = "a:learner/0";
  const auto first = fake.next(10s);
  ASSERT_TRUE(first) << learner.log();
  ASSERT_EQ(first->first, id);
  constexpr uint64_t kGeneration = 1;
  fake.send(
      id,
      [](wire::Envelope::Builder e) {
        auto r = e.getBody().initRendezvous();
        r.setWorldSize(1);
        r.setRank(0);
        r.setResumeFromStep(-1);
        r.setCollectiveTimeoutMs(60000);
      },
      kGeneration);
  auto beat = [&] {
    fake.send(
        id, [](wire::Envelope::Builder e) { e.getBody().initHeartbeat(); }, kGeneration);
  };
  auto refuse = [&](uint64_t seq) {
    fake.send(
        id,
        [seq](wire::Envelope::Builder e) {
          auto ack = e.getBody().initAck();
          ack.setSeq(seq);
          ack.setOk(false);
          ack.setError("checkpoint refused: the fake coordinator takes none");
        },
        kGeneration);
  };
  std::set<int64_t> metrics_steps;
  // Read up to the manifest of checkpoint 20.
  std::optional<uint64_t> manifest_seq;
  while (!manifest_seq) {
    auto m = fake.next_message(10s);
    ASSERT_TRUE(m) << learner.log();
    const auto env = m->second.envelope();
    if (m->second.kind() == wire::Envelope::Body::METRICS)
      metrics_steps.insert(env.getBody().getMetrics().getStep());
    if (m->second.kind() == wire::Envelope::Body::CHECKPOINT_MANIFEST) {
      EXPECT_EQ(env.getBody().getCheckpointManifest().getStep(), 20);
      manifest_seq = env.getSeq();
    }
    beat();
  }
  // Read nothing for a while: the chunks fill the learner's socket. Refuse the upload
  // meanwhile; the learner steps on (to its next checkpoint), posting metrics.
  for (int i = 0; i < 30; ++i) {
    if (i == 6) refuse(*manifest_seq);
    beat();
    std::this_thread::sleep_for(50ms);
  }
  // Now read all: each chunk of a refused upload is refused in turn, as the coordinator
  // does; so is the next checkpoint's upload.
  std::optional<uint64_t> refused_from = manifest_seq;
  auto serve = [&](std::chrono::milliseconds timeout) {
    auto m = fake.next_message(timeout);
    beat();
    if (!m) return;
    const auto env = m->second.envelope();
    switch (m->second.kind()) {
      case wire::Envelope::Body::METRICS:
        metrics_steps.insert(env.getBody().getMetrics().getStep());
        break;
      case wire::Envelope::Body::CHECKPOINT_MANIFEST:
        refused_from = env.getSeq();
        refuse(env.getSeq());
        break;
      case wire::Envelope::Body::CHECKPOINT_CHUNK:
        if (refused_from && env.getSeq() > *refused_from) refuse(env.getSeq());
        break;
      default:
        break;
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + scaled(30s);
  while (std::chrono::steady_clock::now() < deadline &&
         (metrics_steps.empty() || *metrics_steps.rbegin() < 60))
    serve(100ms);
  for (int64_t step = 1; step <= 60; ++step)
    EXPECT_TRUE(metrics_steps.count(step)) << "the metrics of step " << step << " were lost";
  fake.send(
      id,
      [](wire::Envelope::Builder e) {
        auto s = e.getBody().initShutdown();
        s.setReason("test over");
        s.setCheckpointFirst(false);
      },
      kGeneration);
  // The link sends its final heartbeat before it exits: keep reading and beating.
  std::optional<int> exit_code;
  ASSERT_TRUE(wait_until(
      [&] {
        serve(20ms);
        return (exit_code = learner.poll()).has_value();
      },
      10s))
      << learner.log();
  EXPECT_EQ(*exit_code, 0) << learner.log();
  const std::string log = learner.log();
  EXPECT_NE(log.find("checkpoint 20 NOT committed"), std::string::npos) << log;
  // Thousands of chunks were refused: one warning per refused upload says why.
  size_t warnings = 0;
  for (size_t at = log.find("coordinator: checkpoint refused"); at != std::string::npos;
       at = log.find("coordinator: checkpoint refused", at + 1))
    ++warnings;
  EXPECT_GE(warnings, 1u) << log;
  EXPECT_LE(warnings, 4u) << log;
}

}  // namespace
}  // namespace saccade::testing
