// The distributed runtime end to end: real coordinator, agent and actor
// processes, real sockets on 127.0.0.1, real RocksDB in a temp folder.
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

#include "common/file_bytes.h"
#include "control/control.h"
#include "control/rendezvous_store.h"
#include "storage/checkpoint_store.h"
#include "tests/coordinator/runtime_fixture.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kSaccade = build_path("saccade");
const std::string kActor = build_path("tests/coordinator/saccade_test_actor");
const char* kTwoNodes[] = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1",
                           "name = \"n1\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};

// A job on two nodes of one data actor and one learner each, on a free port;
// status lingers after the end so that tests can read the final state.
TestJob two_node_job(int steps) {
  TestJob job;
  job.port = free_port();
  job.steps = steps;
  job.status_linger_ms = 3000;
  job.nodes = {kTwoNodes[0], kTwoNodes[1]};
  return job;
}

// The runtime with the torch-free test bodies (tests/coordinator/test_actor.cpp).
class Runtime : public RuntimeFixture {
 protected:
  void SetUp() override { actor_binary_ = kActor; }
  std::string kill_and_restart_the_coordinator(std::chrono::milliseconds frozen);

  // `job` written three ways: with CURVE and the job's keys (config), with a stranger's
  // client key (wrong), without CURVE (plain); the keys generated in the test's folder.
  struct CurveConfigs {
    fs::path config, wrong, plain;
  };
  CurveConfigs curve_configs(TestJob job);
};

// A [security] section with CURVE on: the job's server keys in `keys`, the client key a
// process presents from `client_dir` (another directory: a stranger's key).
std::string curve_section(const fs::path& keys, const fs::path& client_dir) {
  return fmt::format(
      "[security]\ncurve = true\nserver_key = \"{}\"\nserver_public_key = \"{}\"\n"
      "client_key = \"{}\"\n",
      (keys / "server.key").string(), (keys / "server.pub").string(),
      (client_dir / "client.key").string());
}

Runtime::CurveConfigs Runtime::curve_configs(TestJob job) {
  const fs::path keys = dir_.path() / "keys", stranger = dir_.path() / "stranger";
  for (const fs::path& d : {keys, stranger})
    EXPECT_EQ(run_process({kSaccade, "keys", "generate", d.string()}).exit_code, 0) << d;
  CurveConfigs out;
  job.extra = curve_section(keys, keys);
  out.config = write_config(job);
  job.extra = curve_section(keys, stranger);
  out.wrong = write_config(job, "stranger.toml");
  job.extra = "";
  out.plain = write_config(job, "plain.toml");
  return out;
}

std::string http_get(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST_F(Runtime, TwoNodesRunToTheBudgetAndStatusListsEveryActor) {
  TestJob job;
  job.port = free_port();
  job.metrics_port = free_port();
  job.steps = 40;
  job.status_linger_ms = 3000;
  job.nodes = {kTwoNodes[0], kTwoNodes[1]};
  const fs::path config = write_config(job);
  // 100 ms steps: the job lasts ~4 s, long enough for status polls to see it running on a
  // loaded machine (at the default 10 ms it can finish between two polls).
  const std::vector<std::string> slow = {"SACCADE_TEST_STEP_MS=100"};
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0", slow);
  Child& a1 = agent(config, job.port, "n1", slow);

  auto running = wait_status(config, all_running, 20s);
  ASSERT_TRUE(running) << "the actors never all ran";
  const Json& s = *running;
  EXPECT_EQ(s.at("job").get<std::string>(), "rt-test");
  EXPECT_EQ(s.at("stage").get<std::string>(), "pretrain");
  EXPECT_EQ(s.at("total_steps").get<double>(), 40);
  ASSERT_EQ(s.at("actors").size(), 4u);
  for (const char* role : {"data", "learner"}) {
    for (int rank : {0, 1}) {
      const Json* a = actor(s, role, rank);
      ASSERT_NE(a, nullptr) << role << " " << rank;
      EXPECT_EQ(a->at("node").get<std::string>(), rank == 0 ? "n0" : "n1");
      EXPECT_GT(a->at("pid").get<double>(), 0);
      EXPECT_GE(a->at("heartbeat_age_ms").get<double>(), 0);
    }
  }
  ASSERT_EQ(s.at("nodes").size(), 2u);
  for (const Json& n : s.at("nodes")) EXPECT_EQ(n.at("state").get<std::string>(), "registered");

  const std::string metrics = http_get(job.metrics_port);
  EXPECT_NE(metrics.find("HTTP/1.0 200 OK"), std::string::npos) << metrics;
  EXPECT_NE(
      metrics.find("saccade_actor_step{job=\"rt-test\",role=\"learner\",rank=\"1\",node=\"n1\"}"),
      std::string::npos)
      << metrics;

  auto finished = wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "finished"; }, 20s);
  ASSERT_TRUE(finished);
  for (int rank : {0, 1}) {
    EXPECT_EQ((*actor(*finished, "learner", rank)).at("step").get<double>(), 40);
    EXPECT_EQ((*actor(*finished, "learner", rank)).at("restarts").get<double>(), 0);
  }
  EXPECT_EQ((*finished).at("last_checkpoint_step").get<double>(), 40);
  EXPECT_EQ((*finished).at("generation").get<double>(), 1);
  EXPECT_NEAR((*finished).at("loss").get<double>(), 1.0 / 40, 1e-9);
  EXPECT_EQ(coord.wait(15s), 0);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_EQ(a1.wait(10s), 0);
  // Each agent wrote the config its actors ran under the job's work_dir, not in /tmp.
  for (const char* node : {"n0", "n1"}) {
    std::ifstream in(work_dir() / "agents" / (std::string(node) + ".toml"));
    const std::string toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(toml.find("name = \"rt-test\""), std::string::npos) << node << ": " << toml;
  }
  // The database remembers the job ended: a new coordinator says so and leaves.
  EXPECT_EQ(coordinator(config, "coordinator-again").wait(10s), 0);
}

TEST_F(Runtime, KilledActorsAreRestartedAndTheJobFinishes) {
  // Long enough (15 s of steps) that both kills land before the end on a loaded machine:
  // at 400 steps a sanitizer build beside two compilers finished before the second kill.
  TestJob job = two_node_job(1500);
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  agent(config, job.port, "n0");
  agent(config, job.port, "n1");
  std::mt19937 rng(std::random_device{}());
  for (auto [role, rank] : {std::pair{"data", 1}, std::pair{"learner", 1}}) {
    auto s = wait_status(config, all_running, 20s);
    ASSERT_TRUE(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
    s = status(config);
    ASSERT_TRUE(s);
    const pid_t pid = static_cast<pid_t>((*actor(*s, role, rank)).at("pid").get<double>());
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    auto back = wait_status(
        config,
        [&](const Json& j) {
          const Json& a = *actor(j, role, rank);
          return a.at("restarts").get<double>() == 1 &&
                 a.at("state").get<std::string>() == "running" && a.at("pid").get<double>() != pid;
        },
        10s);
    ASSERT_TRUE(back) << role << " " << rank << " was not restarted";
  }
  auto finished = wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "finished"; }, 60s);
  ASSERT_TRUE(finished);
  EXPECT_EQ((*finished).at("generation").get<double>(), 2);  // one learner lost: one re-rendezvous
  EXPECT_EQ((*actor(*finished, "learner", 1)).at("step").get<double>(), job.steps);
  EXPECT_EQ(coord.wait(15s), 0);
}

// Runs a 150-step two-node job, kills its coordinator once learner 0 is past
// step 20 (frozen for `frozen` first, if not zero) and starts another one on
// the same database. Checks that the job still finishes as if nothing had
// happened: no actor restarted, no re-rendezvous, every checkpoint committed.
// Returns learner 0's log.
std::string Runtime::kill_and_restart_the_coordinator(std::chrono::milliseconds frozen) {
  // Long enough that the status poll sees step 20 well before learner 0's last upload is
  // committed, even on a loaded machine: the freeze must catch an upload in flight.
  const TestJob job = two_node_job(400);
  const fs::path config = write_config(job);
  Child& first = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");  // learner 0 (ranks follow node order)
  Child& a1 = agent(config, job.port, "n1");
  auto s = wait_status(
      config,
      [](const Json& j) {
        return all_running(j) && (*actor(j, "learner", 0)).at("step").get<double>() >= 20;
      },
      20s);
  EXPECT_TRUE(s);
  if (!s) return "";
  if (frozen > 0ms) {
    first.signal(SIGSTOP);
    std::this_thread::sleep_for(frozen);
  }
  first.signal(SIGKILL);
  EXPECT_EQ(first.wait(5s), 128 + SIGKILL);
  std::this_thread::sleep_for(400ms);  // agents and actors notice it is gone
  Child& second = coordinator(config, "coordinator-restarted");
  auto finished = wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "finished"; }, 20s);
  EXPECT_TRUE(finished);
  if (!finished) return "";
  for (const Json& a : (*finished).at("actors"))
    EXPECT_EQ(a.at("restarts").get<double>(), 0) << "actors outlive a coordinator restart";
  EXPECT_EQ((*finished).at("generation").get<double>(), 1);
  EXPECT_EQ((*actor(*finished, "learner", 1)).at("step").get<double>(), job.steps);
  EXPECT_GE((*finished).at("last_checkpoint_step").get<double>(), job.steps);
  EXPECT_EQ(second.wait(15s), 0);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_EQ(a1.wait(10s), 0);
  EXPECT_NE(second.log().find("resumed job"), std::string::npos);
  EXPECT_EQ(a0.log().find("NOT committed"), std::string::npos) << a0.log();
  return a0.log();
}

TEST_F(Runtime, KilledCoordinatorResumesFromItsDatabase) {
  kill_and_restart_the_coordinator(0ms);
}

// Work done while the coordinator is down is not lost. Frozen for 2.5 s
// (10 ms steps, a checkpoint every 10) before it is killed: learner 0 is
// certainly waiting for the answer to a checkpoint and sends it again to the
// restarted coordinator instead of waiting out its timeout; learner 1 (not in
// lockstep with it here) runs to its end meanwhile, and its clean exit,
// reported when its agent registers again, is not taken for a failure.
TEST_F(Runtime, WorkDoneWhileTheCoordinatorIsDownIsNotLost) {
  const std::string learner_log = kill_and_restart_the_coordinator(2500ms);
  EXPECT_NE(learner_log.find("sending it again"), std::string::npos) << learner_log;
}

// An actor that dies while the coordinator is down is restarted by the next
// one for the cause its agent saw, not for having gone missing.
TEST_F(Runtime, AnActorLostWhileTheCoordinatorIsDownIsRestartedForItsCause) {
  const TestJob job = two_node_job(400);
  const fs::path config = write_config(job);
  Child& first = coordinator(config);
  agent(config, job.port, "n0");
  agent(config, job.port, "n1");
  auto s = wait_status(config, all_running, 20s);
  ASSERT_TRUE(s);
  const pid_t pid = static_cast<pid_t>((*actor(*s, "data", 1)).at("pid").get<double>());
  first.signal(SIGSTOP);
  std::this_thread::sleep_for(500ms);  // the agents notice it is gone
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  std::this_thread::sleep_for(300ms);
  first.signal(SIGKILL);
  EXPECT_EQ(first.wait(5s), 128 + SIGKILL);
  Child& second = coordinator(config, "coordinator-restarted");
  auto finished = wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "finished"; }, 20s);
  ASSERT_TRUE(finished);
  EXPECT_EQ((*actor(*finished, "data", 1)).at("restarts").get<double>(), 1);
  EXPECT_EQ(second.wait(15s), 0);
  EXPECT_NE(second.log().find("data 1 on n1 failed (killed by signal 9"), std::string::npos)
      << second.log();
}

TEST_F(Runtime, HungActorsAreKilledAndRestartedWithinTheTimeout) {
  TestJob job = two_node_job(250);
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  // data 1's body goes silent at step 20 (its I/O thread still runs): stall_timeout_s = 1.
  const std::vector<std::string> env = {std::string(kFaultVariable) + "=data:1:20:stall:once"};
  agent(config, job.port, "n0", env);
  agent(config, job.port, "n1", env);
  auto s = wait_status(config, all_running, 20s);
  ASSERT_TRUE(s);
  const pid_t frozen = static_cast<pid_t>((*actor(*s, "data", 0)).at("pid").get<double>());
  ASSERT_EQ(kill(frozen, SIGSTOP), 0);  // a hard hang: no heartbeat from any thread
  const auto t0 = std::chrono::steady_clock::now();
  auto back = wait_status(
      config,
      [&](const Json& j) {
        const Json& a = *actor(j, "data", 0);
        return a.at("restarts").get<double>() == 1 && a.at("state").get<std::string>() == "running";
      },
      10s);
  ASSERT_TRUE(back);
  const auto took = std::chrono::steady_clock::now() - t0;
  // Timeout 6 x 50 ms, backoff 50 ms, process start; generous for a loaded 2-core machine.
  EXPECT_LT(took, scaled(3s))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  auto stalled = wait_status(
      config,
      [&](const Json& j) { return (*actor(j, "data", 1)).at("restarts").get<double>() == 1; }, 10s);
  EXPECT_TRUE(stalled) << "the stalled body was not restarted";
  EXPECT_TRUE(wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "finished"; }, 30s));
  EXPECT_EQ(coord.wait(15s), 0);
}

TEST_F(Runtime, RestartCapFailsTheJobWithItsReason) {
  TestJob job;
  job.port = free_port();
  job.steps = 100000;
  job.max_restarts = 2;
  job.status_linger_ms = 5000;
  job.nodes = {kTwoNodes[0], kTwoNodes[1]};
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  const std::vector<std::string> env = {std::string(kFaultVariable) + "=data:0:3:crash"};
  Child& a0 = agent(config, job.port, "n0", env);
  Child& a1 = agent(config, job.port, "n1", env);
  auto failed = wait_status(
      config, [](const Json& j) { return j.at("state").get<std::string>() == "failed"; }, 20s);
  ASSERT_TRUE(failed);
  const std::string reason = (*failed).at("reason").get<std::string>();
  EXPECT_NE(reason.find("restart cap reached"), std::string::npos) << reason;
  EXPECT_NE(reason.find("data 0 on n0: exit code 7"), std::string::npos) << reason;
  EXPECT_EQ(coord.wait(20s), 3);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_EQ(a1.wait(10s), 0);
}

// Once the job has ended the coordinator only serves status (cluster.status_linger_ms);
// SIGTERM then ends it at once, with the job's exit code, rather than after the linger.
TEST_F(Runtime, SigtermEndsTheStatusLinger) {
  TestJob job;
  job.port = free_port();
  job.steps = 10;
  job.status_linger_ms = 600000;
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  Child& node = agent(config, job.port, "n0");
  ASSERT_TRUE(wait_status(config, finished, 30s));
  EXPECT_EQ(node.wait(15s), 0) << "the agent is told to stop when the job ends";
  EXPECT_TRUE(status(config)) << "status is served after the end";
  coord.signal(SIGTERM);
  EXPECT_EQ(coord.wait(10s), 0);
  EXPECT_NE(coord.log().find("the job has ended; serving status no longer"), std::string::npos);
}

TEST_F(Runtime, SigtermToRunDrainsWithAFinalCheckpoint) {
  TestJob job;
  job.port = free_port();
  job.steps = 100000;
  job.nodes = {"name = \"local\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  const fs::path config = write_config(job);
  Child& run = RuntimeFixture::run(config);
  auto s = wait_status(
      config,
      [](const Json& j) {
        const Json* l = actor(j, "learner", 0);
        return l && (*l).at("step").get<double>() >= 15;
      },
      20s);
  ASSERT_TRUE(s);
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait(15s), 4) << "drained before the budget: paused, exit 4";
  // The final checkpoint was streamed to the coordinator and committed whole.
  int64_t drained_at = 0;
  {
    auto store = storage::CheckpointStore::open((dir_.path() / "work" / "coordinator.db").string());
    const auto latest = store->latest();
    ASSERT_TRUE(latest) << "no final checkpoint";
    EXPECT_GE(latest->step, 15);
    EXPECT_EQ(store->read(latest->step, "state"), fmt::format("step {}", latest->step));
    EXPECT_EQ(store->read(latest->step, "weights"), test_weights(latest->step, 3000));
    drained_at = latest->step;
  }
  EXPECT_NE(run.log().find("job drained"), std::string::npos);

  // Launching the same job again resumes it from that checkpoint (the test learner checks
  // the bytes it gets back) and runs it to its budget, 20 steps on.
  job.steps = static_cast<int>(drained_at) + 20;
  write_config(job);
  Child& resumed = RuntimeFixture::run(config, {}, "run-resumed");
  EXPECT_EQ(resumed.wait(30s), 0);
  EXPECT_NE(resumed.log().find(fmt::format("resumes it from checkpoint {}", drained_at)),
            std::string::npos);
  EXPECT_NE(resumed.log().find(fmt::format("resumed from checkpoint {}", drained_at)),
            std::string::npos);
  EXPECT_NE(resumed.log().find("job finished"), std::string::npos);

  // A finished job stays finished: the next launch says so and exits 0 at once ...
  Child& after = RuntimeFixture::run(config, {}, "run-after");
  EXPECT_EQ(after.wait(15s), 0);
  EXPECT_NE(after.log().find("already finished"), std::string::npos);
  EXPECT_EQ(after.log().find("resumed from checkpoint"), std::string::npos);
  // ... and --fresh starts it over from step 0, without a checkpoint.
  Child& fresh = RuntimeFixture::run(config, {"--fresh"}, "run-fresh");
  EXPECT_EQ(fresh.wait(30s), 0);
  EXPECT_NE(fresh.log().find("--fresh: deleted"), std::string::npos);
  EXPECT_EQ(fresh.log().find("resumed from checkpoint"), std::string::npos);
  EXPECT_NE(fresh.log().find("job finished"), std::string::npos);
}

// The bounded drain: learner 0 is inside a step that will take 120 s when the job
// drains. Waiting for it would outlast the 8 s window (the agent, like Slurm after
// KillWait, SIGKILLs it and the drain is lost); the runtime commits the last completed
// step instead, ~2 s before the window ends, and the learner exits.
TEST_F(Runtime, ADrainCommitsTheLastCompletedStepWhenTheStepInProgressOutlastsTheWindow) {
  TestJob job;
  job.port = free_port();
  job.steps = 1000;
  job.checkpoint_every = 1000;  // no periodic checkpoint: only the drain's can exist
  job.drain_timeout_s = 8;
  job.nodes = {kTwoNodes[0]};
  const fs::path config = write_config(job);
  const std::vector<std::string> env = {"SACCADE_TEST_STEP_MS=20",
                                        std::string(kFaultVariable) + "=learner:0:20:slow"};
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0", env);
  ASSERT_TRUE(wait_status(
      config,
      [](const Json& j) {
        const Json* l = actor(j, "learner", 0);
        return l && (*l).at("step").get<double>() >= 20;
      },
      30s));
  std::this_thread::sleep_for(500ms);  // inside step 21
  const auto drained = std::chrono::steady_clock::now();
  coord.signal(SIGTERM);
  EXPECT_EQ(coord.wait(30s), 4) << "drained before the budget: paused, exit 4";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drained).count();
  EXPECT_LT(seconds, 8.0) << "the drain outlasted its window";
  EXPECT_EQ(a0.wait(15s), 0);
  auto store = storage::CheckpointStore::open((dir_.path() / "work" / "coordinator.db").string());
  const auto latest = store->latest();
  ASSERT_TRUE(latest) << "the drain committed no checkpoint\n" << a0.log();
  EXPECT_EQ(latest->step, 20) << "not the last completed step";
  EXPECT_EQ(store->read(20, "state"), "step 20");
  EXPECT_EQ(store->read(20, "weights"), test_weights(20, 3000));
  EXPECT_NE(a0.log().find("committing the last completed step instead"), std::string::npos)
      << a0.log();
}

TEST_F(Runtime, AResumingLearnerLoadsACheckpointOfMoreChunksThanTheSendQueueHolds) {
  // 2,000 chunks of 16 KiB: twice ZeroMQ's send queue of 1,000 messages. The coordinator must
  // stream them as the learner's socket takes them; sent all at once, the excess is dropped.
  constexpr size_t kBytes = 2000 * 16384;
  TestJob job;
  job.port = free_port();
  job.steps = 200;
  job.checkpoint_every = 50;
  job.heartbeat_misses = 40;  // 2 s: moving 32 MB checkpoints on a loaded 2-core machine
  job.cluster_extra = "max_message_bytes = 32768";
  job.small_frames = true;
  job.status_linger_ms = 3000;
  job.nodes = {kTwoNodes[0], kTwoNodes[1]};
  const fs::path config = write_config(job);
  // 30 ms steps: checkpoint 50 is committed long before learner 1 crashes at step 120.
  const std::vector<std::string> env = {fmt::format("{}={}", kCheckpointBytesVariable, kBytes),
                                        "SACCADE_TEST_STEP_MS=30",
                                        std::string(kFaultVariable) + "=learner:1:120:crash:once"};
  Child& coord = coordinator(config);
  agent(config, job.port, "n0", env);
  Child& a1 = agent(config, job.port, "n1", env);
  auto done = wait_status(config, finished, 60s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*done).at("generation").get<double>(), 2);
  EXPECT_EQ((*actor(*done, "learner", 1)).at("restarts").get<double>(),
            1);  // resumed once, did not fail
  EXPECT_EQ((*actor(*done, "learner", 1)).at("step").get<double>(), 200);
  EXPECT_EQ(coord.wait(15s), 0);
  const std::string log = a1.log();
  EXPECT_NE(log.find(fmt::format("({} bytes of weights)", kBytes)), std::string::npos) << log;
}

// Learner 0 saves each checkpoint twice with the same bytes (as after a coordinator restart
// that had committed the first copy): the second is answered from the coordinator's store by
// its manifest, without a second commit, and the learner takes that answer.
TEST_F(Runtime, ACheckpointSentAgainIsAnsweredFromTheStoreWithoutASecondCommit) {
  TestJob job;
  job.port = free_port();
  job.steps = 100;
  job.checkpoint_every = 50;
  job.status_linger_ms = 3000;  // the job takes ~1 s: status must outlive it
  job.nodes = {kTwoNodes[0], kTwoNodes[1]};
  const fs::path config = write_config(job);
  const std::vector<std::string> env = {fmt::format("{}={}", kCheckpointBytesVariable, 200000),
                                        std::string(kRecommitVariable) + "=1"};
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0", env);
  agent(config, job.port, "n1", env);
  ASSERT_TRUE(wait_status(config, finished, 60s));
  EXPECT_EQ(coord.wait(15s), 0);
  const std::string log = coord.log(), learner = a0.log();
  for (int step : {50, 100}) {
    EXPECT_NE(learner.find(fmt::format("re-checkpoint {} committed", step)), std::string::npos)
        << learner;
    EXPECT_NE(log.find(fmt::format("checkpoint {}: already committed with the same 2 blobs", step)),
              std::string::npos)
        << log;
    const std::string commit = fmt::format("checkpoint {} committed (", step);
    const size_t first = log.find(commit);
    EXPECT_NE(first, std::string::npos) << log;
    EXPECT_EQ(log.find(commit, first + 1), std::string::npos) << "committed twice:\n" << log;
  }
}

// A policy stage's actors get its inputs (the probe's head, the checkpoint it
// names) from the coordinator, which reads them from policy.input_dir: bytes
// intact over several chunks, only the blobs asked for, nothing outside the
// folder, a clear refusal for what is missing.
TEST_F(Runtime, AStagesInputsReachItsActorsOverTheWire) {
  const fs::path input = dir_.path() / "pretrain-job";
  fs::create_directories(input);
  write_file_bytes(input / kTestInputFile, test_weights(1, kTestInputFileBytes));
  {
    auto store = storage::CheckpointStore::open((input / "checkpoints.db").string());
    store->commit(7, {{"teacher", test_weights(7, kTestTeacherBytes)}, {"student", "student"}});
  }
  TestJob job;
  job.port = free_port();
  job.stages = {"policy"};
  job.steps = 100;
  job.status_linger_ms = 3000;
  job.cluster_extra = "max_message_bytes = 32768";  // the teacher crosses as 13 chunks
  job.nodes = {"name = \"n0\"\nhost = \"127.0.0.1\"\nlearners = 1\nrollout_actors = 1"};
  job.extra = fmt::format("[policy]\ninput_dir = \"{}\"\n", input.string());
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0", {std::string(kInputStepVariable) + "=7"});
  auto done = wait_status(config, finished, 60s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*actor(*done, "rollout", 0)).at("restarts").get<double>(), 0);
  EXPECT_EQ(coord.wait(15s), 0);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_NE(a0.log().find(fmt::format("inputs verified: {} bytes of head, {} bytes of teacher 7",
                                      kTestInputFileBytes, kTestTeacherBytes)),
            std::string::npos)
      << a0.log();
  const std::string log = coord.log();
  EXPECT_NE(log.find("expected a plain file name"), std::string::npos) << log;
  EXPECT_NE(log.find("has no committed checkpoint 8"), std::string::npos) << log;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// One job, three stages, in one work_dir: pretraining's learners and data
// actor, then the probe in learner 0's slot (it reads pretraining's last
// checkpoint and commits the stage's output), then the policy learner and a
// rollout actor that gets the probe's output and pretraining's checkpoint over
// the wire. The probe crashes once and is restarted; the coordinator is
// killed during the policy stage: the next one resumes at that stage and no
// finished stage runs again.
TEST_F(Runtime, AJobRunsItsStagesInOrderAndAFinishedStageDoesNotRunAgain) {
  TestJob job;
  job.port = free_port();
  job.metrics_port = free_port();
  job.stages = {"pretrain", "probe", "policy", "eval"};
  job.steps = 30;
  job.status_linger_ms = 3000;
  job.cluster_extra = fmt::format("rollout_port_base = {}\n", free_ports(1));
  job.nodes = {
      "name = \"n0\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1\n"
      "rollout_actors = 1"};
  const fs::path config = write_config(job);
  Child& first = coordinator(config);
  Child& a0 = agent(
      config, job.port, "n0",
      {"SACCADE_TEST_STEP_MS=60", std::string(kInputStepVariable) + "=30",
       std::string(kInputBlobVariable) + "=weights",
       std::string(kFaultVariable) + "=learner@probe:0:0:crash:once;learner@eval:0:0:crash:once"});
  auto policy = wait_status(
      config,
      [](const Json& j) {
        const Json* learner = actor(j, "learner", 0);
        return j.at("stage").get<std::string>() == "policy" && learner &&
               learner->at("step").get<double>() >= 5;
      },
      60s);
  ASSERT_TRUE(policy) << first.log();
  const Json& s = *policy;
  EXPECT_EQ(s.at("stage_index").get<double>(), 2);
  ASSERT_EQ(s.at("stages").size(), 4u);
  EXPECT_EQ(s.at("stages")[0].at("state").get<std::string>(), "finished");
  EXPECT_EQ(s.at("stages")[0].at("last_step").get<double>(), 30);
  EXPECT_EQ(s.at("stages")[1].at("state").get<std::string>(), "finished");
  EXPECT_EQ(s.at("stages")[1].at("last_step").get<double>(), 30);  // the step it probed
  EXPECT_EQ(s.at("stages")[2].at("state").get<std::string>(), "running");
  EXPECT_EQ(s.at("stages")[3].at("state").get<std::string>(), "pending");
  // Only the policy stage's actors exist now.
  ASSERT_EQ(s.at("actors").size(), 2u);
  EXPECT_NE(actor(s, "rollout", 0), nullptr);
  const std::string metrics = http_get(job.metrics_port);
  EXPECT_NE(metrics.find("saccade_stage_index{job=\"rt-test\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(
      metrics.find("saccade_stage_state{job=\"rt-test\",stage=\"probe\",state=\"finished\"} 1"),
      std::string::npos)
      << metrics;
  const ProcessResult table = run_process({kSaccade, "status", "--config", config.string()});
  EXPECT_NE(table.out.find("stage 3/4 policy (pretrain finished in "), std::string::npos)
      << table.out;

  first.signal(SIGKILL);
  EXPECT_EQ(first.wait(5s), 128 + SIGKILL);
  Child& second = coordinator(config, "coordinator-restarted");
  auto done = wait_status(config, finished, 60s);
  ASSERT_TRUE(done) << second.log();
  EXPECT_EQ((*done).at("stage").get<std::string>(), "eval");
  for (const Json& st : (*done).at("stages"))
    EXPECT_EQ(st.at("state").get<std::string>(), "finished") << st;
  EXPECT_EQ((*actor(*done, "learner", 0)).at("restarts").get<double>(), 1);  // the eval crash
  EXPECT_EQ(second.wait(15s), 0);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_NE(second.log().find("stage 3/4 policy"), std::string::npos) << second.log();
  EXPECT_NE(second.log().find("stage 4/4 eval begins"), std::string::npos) << second.log();

  const std::string log = a0.log();
  // Each stage's actors started once (the probe and eval twice: each crashed once),
  // learner 0 once per stage; the first learner 0 (pretraining's) did not crash at its step 0.
  EXPECT_EQ(occurrences(log, "started learner 0 "), 6u) << log;
  EXPECT_EQ(occurrences(log, "test fault crash"), 2u) << log;
  EXPECT_NE(log.find("eval of checkpoint 30 committed"), std::string::npos) << log;
  EXPECT_EQ(occurrences(log, "started data 0 "), 1u) << log;
  EXPECT_EQ(occurrences(log, "started rollout 0 "), 1u) << log;
  EXPECT_NE(log.find("probe of checkpoint 30 committed"), std::string::npos) << log;
  EXPECT_NE(log.find(fmt::format("inputs verified: {} bytes of head, 3000 bytes of teacher 30",
                                 kTestInputFileBytes)),
            std::string::npos)
      << log;
  // Each stage's checkpoints in its own store: the policy stage's step 30 did not
  // overwrite pretraining's.
  auto pretrain = storage::CheckpointStore::open((work_dir() / "coordinator.db").string());
  EXPECT_EQ(pretrain->read(30, "weights"), test_weights(30, 3000));
  auto probe = storage::CheckpointStore::open((work_dir() / "probe-checkpoints.db").string());
  EXPECT_EQ(probe->read(30, kTestInputFile), test_weights(1, kTestInputFileBytes));
  auto policy_store =
      storage::CheckpointStore::open((work_dir() / "policy-checkpoints.db").string());
  ASSERT_TRUE(policy_store->latest());
  EXPECT_EQ(policy_store->latest()->step, 30);
  auto eval = storage::CheckpointStore::open((work_dir() / "eval-checkpoints.db").string());
  EXPECT_EQ(eval->read(30, kTestInputFile), test_weights(1, kTestInputFileBytes));
}

// A finished job whose config gains a stage goes on with that stage alone.
TEST_F(Runtime, AFinishedJobRunsAStageAddedToItsConfig) {
  TestJob job;
  job.port = free_port();
  job.steps = 20;
  job.status_linger_ms = 1000;
  job.nodes = {kTwoNodes[0]};
  const fs::path config = write_config(job);
  Child& first = run(config, {}, "run-pretrain");
  EXPECT_EQ(first.wait(60s), 0) << first.log();
  job.stages = {"pretrain", "probe"};
  write_config(job);
  Child& again = run(config, {}, "run-probe");
  EXPECT_EQ(again.wait(60s), 0) << again.log();
  const std::string log = again.log();
  EXPECT_NE(log.find("job.stages adds probe"), std::string::npos) << log;
  EXPECT_NE(log.find("probe of checkpoint 20 committed"), std::string::npos) << log;
  EXPECT_EQ(occurrences(log, "started learner 0 "), 1u) << log;  // the probe only
  EXPECT_EQ(occurrences(log, "started data 0 "), 0u) << log;
}

// Pretraining for 20 steps on one node, then the probe.
TestJob pretrain_then_probe() {
  TestJob job;
  job.port = free_port();
  job.steps = 20;
  job.status_linger_ms = 1000;
  job.stages = {"pretrain", "probe"};
  job.nodes = {kTwoNodes[0]};
  return job;
}

// A stage whose checkpoint store cannot open fails the job with the reason,
// after the stage before it committed; the next launch runs it once it can.
TEST_F(Runtime, AStageThatCannotBeginFailsTheJobWithItsReason) {
  const fs::path config = write_config(pretrain_then_probe());
  fs::create_directories(work_dir());
  std::ofstream(work_dir() / "probe-checkpoints.db") << "not a database";
  Child& first = run(config, {}, "run-blocked");
  EXPECT_EQ(first.wait(60s), 3) << first.log();  // kExitJobFailed
  EXPECT_NE(first.log().find("stage pretrain finished, the next cannot begin"), std::string::npos)
      << first.log();
  EXPECT_NE(first.log().find("probe-checkpoints.db"), std::string::npos) << first.log();
  fs::remove(work_dir() / "probe-checkpoints.db");
  Child& again = run(config, {}, "run-unblocked");
  EXPECT_EQ(again.wait(60s), 0) << again.log();
  EXPECT_NE(again.log().find("probe of checkpoint 20 committed"), std::string::npos) << again.log();
  EXPECT_EQ(occurrences(again.log(), "started data 0 "), 0u) << again.log();  // pretrain is done
}

// An actor that cannot use its stage's inputs (control::kExitInputRefused)
// fails the job at once with the reason: restarting it would fail the same way.
TEST_F(Runtime, AnActorThatRefusesItsInputsFailsTheJobWithoutRestarts) {
  const fs::path config = write_config(pretrain_then_probe());
  Child& first =
      run(config, {}, "run-refused", {std::string(kFaultVariable) + "=learner@probe:0:0:refuse"});
  EXPECT_EQ(first.wait(60s), 3) << first.log();  // kExitJobFailed
  const std::string log = first.log();
  EXPECT_NE(log.find("learner 0 on n0 cannot run stage probe with its inputs (exit code 78"),
            std::string::npos)
      << log;
  EXPECT_EQ(occurrences(log, "test fault refuse"), 1u) << log;  // never restarted
}

TEST_F(Runtime, ClientsWithoutTheJobsKeyAreRefused) {
  TestJob job;
  job.port = free_port();
  job.steps = 100000;
  job.nodes = {kTwoNodes[0], "name = \"n1\"\nhost = \"127.0.0.1\"\ndata_actors = 0\nlearners = 0"};
  const auto [config, wrong, plain] = curve_configs(job);

  Child& coord = coordinator(config);
  Child& good = agent(config, job.port, "n0");
  Child& bad = agent(wrong, job.port, "n1");
  auto s = wait_status(config, all_running, 20s);
  ASSERT_TRUE(s) << "the job's own keys must work";
  std::this_thread::sleep_for(300ms);
  int code = 0;
  EXPECT_FALSE(status(wrong, &code));
  EXPECT_EQ(code, 1);
  EXPECT_FALSE(status(plain, &code));
  EXPECT_EQ(code, 1);
  s = status(config);
  ASSERT_TRUE(s);
  for (const Json& n : (*s).at("nodes"))
    EXPECT_EQ(n.at("state").get<std::string>(),
              n.at("name").get<std::string>() == "n1" ? "waiting" : "registered");
  coord.signal(SIGTERM);  // drains the job
  EXPECT_EQ(coord.wait(20s), 4);
  EXPECT_EQ(good.wait(10s), 0);
  EXPECT_FALSE(bad.poll()) << "the refused agent waits for a coordinator that never answers";
  bad.signal(SIGHUP);  // its ssh session ended (scripts/ssh/saccade-ssh.sh): it stops as on SIGTERM
  EXPECT_EQ(bad.wait(5s), 0);
  EXPECT_NE(coord.log().find("client key is not this job's"), std::string::npos);
}

}  // namespace
}  // namespace saccade::testing

namespace saccade::testing {
namespace {

// What a peer gets back within 2 s for a set and a get on the rendezvous store
// of `generation` and a status request, sent as `role` (routing id `identity`)
// with the CURVE settings of `config_file` ([security] off: plain TCP).
std::vector<wire::Envelope::Body::Which> try_the_store(const fs::path& config_file, int port,
                                                       wire::Role role, const std::string& identity,
                                                       uint64_t generation) {
  const JobConfig config = load_config(config_file.string());
  const control::Security security = control::load_security(config.security, false);
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::routing_id, identity);
  if (security.curve) {
    socket.set(zmq::sockopt::curve_serverkey, security.server_public);
    socket.set(zmq::sockopt::curve_publickey, security.client.public_key);
    socket.set(zmq::sockopt::curve_secretkey, security.client.secret_key);
  }
  socket.connect(fmt::format("tcp://127.0.0.1:{}", port));
  control::EnvelopeWriter writer({config.job.name, role, 0, "n0"});
  control::StoreQuery set;
  set.op = wire::StoreOp::SET;
  set.keys = {"test/rank/1"};
  set.value = "an address of the stranger's choosing";
  control::StoreQuery get;
  get.op = wire::StoreOp::GET;
  get.keys = {"test/rank/0"};
  get.timeout_ms = 500;
  for (const control::StoreQuery& q : {set, get})
    socket.send(writer.make(generation,
                            [&](wire::Envelope::Builder e) {
                              control::write_store_request(writer.next_seq(), generation, q,
                                                           e.getBody().initStoreRequest());
                            }),
                zmq::send_flags::dontwait);
  socket.send(
      writer.make(generation, [](wire::Envelope::Builder e) { e.getBody().initStatusRequest(); }),
      zmq::send_flags::dontwait);
  std::vector<wire::Envelope::Body::Which> got;
  const auto deadline = std::chrono::steady_clock::now() + scaled(2s);
  while (std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 50ms);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    wire::Received r = wire::recv_message(socket, control::expect_any_job(config));
    if (r.status == wire::RecvStatus::kOk) got.push_back(r.message->kind());
  }
  return got;
}

// The learners meet through the coordinator's store over their CURVE link; a peer
// without the job's keys (or without CURVE) cannot set or read a key, even posing as
// learner 0, a process with the keys that is no learner is refused, and the job runs
// on undisturbed.
TEST_F(Runtime, OnlyTheJobsLearnersReachTheRendezvousStore) {
  TestJob job = two_node_job(100000);
  const auto [config, wrong, plain] = curve_configs(job);

  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");
  Child& a1 = agent(config, job.port, "n1");
  auto stepping = [](const Json& s) {
    return all_running(s) && (*actor(s, "learner", 0)).at("step").get<double>() > 0 &&
           (*actor(s, "learner", 1)).at("step").get<double>() > 0;
  };
  auto s = wait_status(config, stepping, 30s);
  ASSERT_TRUE(s) << "the learners met through the store with the job's keys";
  const auto generation = (*s).at("generation").get<uint64_t>();
  using Body = wire::Envelope::Body;
  const std::string learner0 = control::actor_identity(wire::Role::LEARNER, 0);
  EXPECT_TRUE(try_the_store(wrong, job.port, wire::Role::LEARNER, learner0, generation).empty())
      << "another client key: no handshake, nothing reaches the store";
  EXPECT_TRUE(try_the_store(plain, job.port, wire::Role::LEARNER, learner0, generation).empty())
      << "no CURVE: no handshake";
  // With the job's keys the same requests from a status client: its status is
  // answered (the socket works), the store requests are not.
  EXPECT_EQ(try_the_store(config, job.port, wire::Role::CLIENT, "status-client", generation),
            std::vector<Body::Which>{Body::STATUS_REPLY});

  // Nothing of the job listens but the coordinator, on its configured address: no store port.
  std::vector<std::string> listening;
  for (pid_t pid : descendants())
    for (const Listener& l : listening_sockets(pid))
      listening.push_back(pid == coord.pid() ? fmt::format("{}:{}", l.address, l.port)
                                             : l.describe());
  EXPECT_EQ(listening, std::vector<std::string>{fmt::format("127.0.0.1:{}", job.port)});

  const double step = (*actor(*status(config), "learner", 0)).at("step").get<double>();
  s = wait_status(
      config,
      [&](const Json& now) {
        return (*actor(now, "learner", 0)).at("step").get<double>() > step + 20 &&
               (*actor(now, "learner", 1)).at("step").get<double>() > step + 20;
      },
      20s);
  ASSERT_TRUE(s) << "the learners train on";
  EXPECT_EQ((*s).at("generation").get<uint64_t>(), generation) << "no re-rendezvous";
  for (int rank : {0, 1})
    EXPECT_EQ((*actor(*s, "learner", rank)).at("restarts").get<double>(), 0) << rank;
  coord.signal(SIGTERM);
  EXPECT_EQ(coord.wait(20s), 4);
  EXPECT_EQ(a0.wait(10s), 0);
  EXPECT_EQ(a1.wait(10s), 0);
  const std::string log = coord.log();
  EXPECT_NE(log.find("client key is not this job's"), std::string::npos) << log;
  EXPECT_NE(log.find("clients may only ask for status"), std::string::npos) << log;
  for (Child* a : {&a0, &a1})
    EXPECT_NE(a->log().find(fmt::format("met generation {} (2 learners)", generation)),
              std::string::npos)
        << a->log();
}

TEST_F(Runtime, PeersOfAnotherJobOrNodeAreRefusedAtOnceWithTheReason) {
  TestJob job;
  job.port = free_port();
  job.steps = 100000;
  job.nodes = {kTwoNodes[0]};
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  ASSERT_TRUE(wait_until([&] { return status(config).has_value(); }, 20s));
  const std::string address = "127.0.0.1:" + std::to_string(job.port);

  // Status for another job name: answered with the name of the job this coordinator runs.
  const ProcessResult other =
      run_process({kSaccade, "status", "--coordinator", address, "--job", "someone-else",
                   "--timeout-ms", std::to_string(scaled(3s).count())});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("runs job \"rt-test\", not \"someone-else\""), std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("--job rt-test"), std::string::npos) << other.err;
  // The README's plain form (no --job, no --config) shows whichever job runs there.
  const ProcessResult plain = run_process({kSaccade, "status", "--coordinator", address, "--json",
                                           "--timeout-ms", std::to_string(scaled(3s).count())});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("\"job\":\"rt-test\""), std::string::npos) << plain.out;

  // An agent whose node is not in cluster.nodes exits at once, naming it and the known ones.
  const auto start = std::chrono::steady_clock::now();
  Child& stray = agent(config, job.port, "n7");
  EXPECT_EQ(stray.wait(10s), 5) << "kExitRefused";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(stray.log().find("node \"n7\" is not in cluster.nodes of job \"rt-test\" (n0)"),
            std::string::npos)
      << stray.log();

  // An agent of another job (same port, another job.name) is refused the same way.
  TestJob stranger = job;
  stranger.name = "rt-other";
  const fs::path other_config = write_config(stranger, "other.toml");
  Child& foreign = agent(other_config, job.port, "n0");
  EXPECT_EQ(foreign.wait(10s), 5);
  EXPECT_NE(foreign.log().find("runs job \"rt-test\", not \"rt-other\""), std::string::npos)
      << foreign.log();

  coord.signal(SIGTERM);
  EXPECT_EQ(coord.wait(20s), 4) << "drained before its budget";
}

TEST_F(Runtime, ASecondLaunchOnTheSamePortsFailsFastAndTouchesNothing) {
  TestJob job;
  job.port = free_port();
  job.steps = 100000;
  job.nodes = {"name = \"local\"\nhost = \"127.0.0.1\"\ndata_actors = 1\nlearners = 1"};
  const fs::path config = write_config(job);
  Child& first = run(config);
  ASSERT_TRUE(wait_status(config, all_running, 20s)) << "the first launch never ran";

  // The same job again, in its own work_dir, on the same ports: its coordinator cannot bind
  // (the error names the port), and its agent, of another launch, is refused by the first
  // launch's coordinator instead of joining it.
  const fs::path second_config = dir_.path() / "second.toml";
  std::ofstream(second_config) << job_toml(job, dir_.path() / "work2");
  Child& second = run(second_config, {}, "run-second");
  EXPECT_EQ(second.wait(20s), 1) << "its coordinator died";
  const std::string port = std::to_string(job.port);
  EXPECT_NE(second.log().find("cannot bind tcp://127.0.0.1:" + port), std::string::npos)
      << second.log();
  EXPECT_NE(second.log().find("the port is taken"), std::string::npos) << second.log();
  EXPECT_NE(second.log().find("but this coordinator of job \"rt-test\" is launch"),
            std::string::npos)
      << second.log();

  // An agent started by hand with another launch id is refused the same way, naming both.
  Child& stray = agent(config, job.port, "local", {"SACCADE_LAUNCH=launch-elsewhere"});
  EXPECT_EQ(stray.wait(10s), 5);
  EXPECT_NE(stray.log().find("agent of launch \"launch-elsewhere\""), std::string::npos)
      << stray.log();

  // The first launch never noticed: still running, its learner still stepping.
  auto before = status(config);
  ASSERT_TRUE(before);
  EXPECT_EQ((*before).at("state").get<std::string>(), "running");
  const double step = (*actor(*before, "learner", 0)).at("step").get<double>();
  EXPECT_TRUE(wait_status(
      config,
      [&](const Json& j) { return (*actor(j, "learner", 0)).at("step").get<double>() > step + 5; },
      10s));
  EXPECT_EQ((*actor(*before, "learner", 0)).at("restarts").get<double>(), 0);
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(20s), 4);
}

}  // namespace
}  // namespace saccade::testing
