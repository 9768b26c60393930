// The supervisor's and the stage runner's decisions without processes or sockets: a
// job's state over a real store in a temp folder, peers that record what they are sent
// (RecordingPeers), and time that is whatever each test says.
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"
#include "coordinator/peer_messages.h"
#include "coordinator/stage_inputs.h"
#include "coordinator/stage_runner.h"
#include "coordinator/state_store.h"
#include "coordinator/supervisor.h"
#include "tests/coordinator/recording_peers.h"
#include "tests/support/temp_dir.h"

namespace saccade::coordinator {
namespace {

using Kind = RecordingPeers::Kind;

const ActorKey kData0{wire::Role::DATA, 0};
const ActorKey kLearner0{wire::Role::LEARNER, 0};
const ActorKey kLearner1{wire::Role::LEARNER, 1};

// One node "a" with a data actor per learner; a peer silent for 300 ms is lost.
std::string job_toml(const std::string& cluster, int learners = 1,
                     const std::string& stages = "\"pretrain\"") {
  return "[job]\nstages = [" + stages +
         "]\n"
         "[cluster]\nheartbeat_interval_ms = 100\nheartbeat_misses = 3\n" +
         cluster + "\n[[cluster.nodes]]\nname = \"a\"\ndata_actors = " + std::to_string(learners) +
         "\nlearners = " + std::to_string(learners) + "\n";
}

// The coordinator's pieces wired as the coordinator wires them, minus its sockets.
struct SupervisedJob {
  explicit SupervisedJob(const std::string& toml) : config(parse_config(toml, "t")) {
    job.load(0);
    stages.begin_stage();
  }

  ActorRecord& actor(ActorKey key) { return job.actors.at(key); }

  // Node a's agent registers, running no actors: the pending ones are started.
  void register_node(int64_t now) {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<wire::RegisterNode>();
    r.setNodeName("a");
    supervisor.on_register(job.nodes.at("a"), r.asReader(), now);
  }
  // Actor `key`, process `pid`, heartbeats (in the current generation unless told).
  void heartbeat(ActorKey key, uint32_t pid, int64_t now,
                 std::optional<uint64_t> generation = std::nullopt) {
    capnp::MallocMessageBuilder m;
    auto hb = m.initRoot<wire::Heartbeat>();
    hb.setState(wire::ActorState::RUNNING);
    supervisor.on_heartbeat(actor(key), pid, hb.asReader(), generation.value_or(job.generation),
                            now);
  }
  // Node a's agent heartbeats, and so does every live actor, as pid 100 + rank.
  void everyone_heartbeats(int64_t now) {
    supervisor.on_agent_heartbeat(job.nodes.at("a"), now);
    for (auto& [key, a] : job.actors)
      if (alive(a.phase)) heartbeat(key, 100 + static_cast<uint32_t>(key.second), now);
  }
  // Node a's agent reports that actor `key` ended. Returns why the report was dropped.
  std::string report_exit(ActorKey key, int exit_code, int signal, int64_t now) {
    capnp::MallocMessageBuilder m;
    auto ev = m.initRoot<wire::ActorEvent>();
    ev.setRole(key.first);
    ev.setRank(key.second);
    ev.setPid(actor(key).pid);
    ev.setState(exit_code == 0 && signal == 0 ? wire::ActorState::EXITED
                                              : wire::ActorState::FAILED);
    ev.setExitCode(exit_code);
    ev.setSignal(signal);
    return supervisor.on_agent_event(job.nodes.at("a"), ev.asReader(), now);
  }
  // One tick of the coordinator's loop.
  void tick(int64_t now) {
    const StageProgress progress = stages.progress();
    supervisor.tick(now);
    stages.tick(now, progress);
  }
  // The starts (or kills) sent for actor `key`.
  std::vector<RecordingPeers::Sent> commands(ActorKey key, bool start) const {
    std::vector<RecordingPeers::Sent> out;
    for (const auto& s : peers.of(Kind::ACTOR_COMMAND))
      if (s.actor == key && s.start == start) out.push_back(s);
    return out;
  }

  const testing::TempDir dir{"supervisor"};
  const JobConfig config;
  StateStore store{dir.path() / "coordinator.db"};
  JobState job{config, store, 0};
  StageInputs inputs{config, store.checkpoints("pretrain"), dir.path() / "coordinator.db"};
  RecordingPeers peers;
  CheckpointService checkpoints{config, job, store, inputs, peers};
  PeerMessages messages{config, job, peers};
  StageRunner stages{config, job, store, inputs, messages};
  Supervisor supervisor{config, job, stages, messages, checkpoints};
};

// An actor that stops heartbeating is killed as hung once (not again while the kill is
// under way), and restarted after the backoff when its agent reports the exit; the other
// actor, which kept heartbeating, is left alone, and a data actor begins no new generation.
TEST(Supervisor, RestartsAnActorThatMissedItsHeartbeats) {
  SupervisedJob j(job_toml("restart_backoff_ms = 1000\nrestart_backoff_max_ms = 8000\n"));
  j.register_node(0);
  ASSERT_EQ(j.commands(kData0, true).size(), 1u);
  ASSERT_EQ(j.commands(kLearner0, true).size(), 1u);
  j.everyone_heartbeats(100);
  EXPECT_EQ(j.actor(kData0).phase, Phase::kRunning);

  j.tick(350);  // 250 ms of silence: within the 300 ms allowed
  EXPECT_TRUE(j.commands(kData0, false).empty()) << "killed before it missed its heartbeats";

  j.supervisor.on_agent_heartbeat(j.job.nodes.at("a"), 400);
  j.heartbeat(kLearner0, 100, 400);  // data 0 stays silent
  j.tick(450);                       // data 0 silent for 350 ms
  const auto kills = j.commands(kData0, false);
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].id, control::agent_identity("a")) << "the kill goes to the actor's agent";
  EXPECT_NE(kills[0].error.find("hung"), std::string::npos) << kills[0].error;
  EXPECT_TRUE(j.commands(kLearner0, false).empty()) << "the learner heartbeats";
  j.tick(550);
  EXPECT_EQ(j.commands(kData0, false).size(), 1u) << "one kill per timeout, not per tick";

  const uint64_t generation = j.job.generation;
  EXPECT_EQ(j.report_exit(kData0, 0, 9, 600), "");
  EXPECT_EQ(j.actor(kData0).phase, Phase::kRestarting);
  EXPECT_EQ(j.actor(kData0).restart_at_ms, 600 + 1000);
  EXPECT_EQ(j.job.role_restarts[wire::Role::DATA], 1u);
  EXPECT_EQ(j.job.generation, generation) << "only a lost learner begins a generation";

  j.everyone_heartbeats(1500);
  j.tick(1599);
  EXPECT_EQ(j.commands(kData0, true).size(), 1u) << "restarted before its backoff ran out";
  j.tick(1600);
  const auto starts = j.commands(kData0, true);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[1].restarts, 1u);
  EXPECT_EQ(j.actor(kData0).phase, Phase::kStarting);
  EXPECT_EQ(j.job.state, JobPhase::kRunning);
}

// The restart delay doubles with each restart of the role (whichever of its actors failed)
// up to restart_backoff_max_ms.
TEST(Supervisor, BackoffDoublesPerRestartOfTheRoleUpToItsCap) {
  SupervisedJob j(job_toml("restart_backoff_ms = 100\nrestart_backoff_max_ms = 350\n", 2));
  j.register_node(0);
  int64_t now = 10;
  const std::vector<int64_t> expected = {100, 200, 350, 350};
  for (size_t i = 0; i < expected.size(); ++i) {
    // Alternate the learners: the backoff is the role's, not one actor's.
    const ActorKey key = i % 2 == 0 ? kLearner0 : kLearner1;
    j.everyone_heartbeats(now);
    ASSERT_EQ(j.report_exit(key, 1, 0, now), "");
    ASSERT_EQ(j.actor(key).phase, Phase::kRestarting);
    EXPECT_EQ(j.actor(key).restart_at_ms - now, expected[i]) << "restart " << i + 1;
    const size_t starts = j.commands(key, true).size();
    j.everyone_heartbeats(now + expected[i] - 1);  // longer delays outlast the 300 ms timeout
    j.tick(now + expected[i] - 1);
    EXPECT_EQ(j.commands(key, true).size(), starts) << "restart " << i + 1 << " came early";
    now += expected[i];
    j.everyone_heartbeats(now);
    j.tick(now);
    EXPECT_EQ(j.commands(key, true).size(), starts + 1) << "restart " << i + 1 << " is due";
    now += 10;
  }
  EXPECT_EQ(j.job.role_restarts[wire::Role::LEARNER], 4u);
  EXPECT_EQ(j.job.role_restarts[wire::Role::DATA], 0u);
}

// Past cluster.max_restarts failures of one role the job fails, naming the cap, the
// actor is not restarted, and the live actors are told to stop.
TEST(Supervisor, TheJobFailsWhenARoleExceedsItsRestartCap) {
  SupervisedJob j(job_toml("max_restarts = 2\nrestart_backoff_ms = 10\n"));
  j.register_node(0);
  int64_t now = 100;
  for (int failure = 1; failure <= 2; ++failure) {
    j.everyone_heartbeats(now);
    ASSERT_EQ(j.report_exit(kData0, 7, 0, now), "");
    EXPECT_EQ(j.actor(kData0).phase, Phase::kRestarting) << "failure " << failure;
    now += 100;
    j.tick(now);
    ASSERT_EQ(j.actor(kData0).phase, Phase::kStarting) << "failure " << failure;
  }
  EXPECT_EQ(j.job.state, JobPhase::kRunning);
  j.everyone_heartbeats(now);
  ASSERT_EQ(j.report_exit(kData0, 7, 0, now), "");
  EXPECT_EQ(j.job.state, JobPhase::kFailed);
  EXPECT_NE(j.job.reason.find("restart cap reached: data actors failed 3 times "
                              "(cluster.max_restarts = 2)"),
            std::string::npos)
      << j.job.reason;
  EXPECT_EQ(j.actor(kData0).phase, Phase::kFailed);
  const auto shutdowns = j.peers.of(Kind::SHUTDOWN);
  ASSERT_FALSE(shutdowns.empty());
  EXPECT_EQ(shutdowns[0].id, control::actor_identity(wire::Role::LEARNER, 0));
  EXPECT_FALSE(shutdowns[0].checkpoint_first);
  const size_t starts = j.commands(kData0, true).size();
  j.tick(now + 10000);
  EXPECT_EQ(j.commands(kData0, true).size(), starts) << "no restart after the cap";
}

// A lost learner begins a new generation: the other learner is sent its rendezvous at once,
// and a learner that heartbeats from an older generation is sent it again.
TEST(Supervisor, ALostLearnerBeginsAGenerationEveryLearnerRendezvousesIn) {
  SupervisedJob j(job_toml("restart_backoff_ms = 10\n", 2));
  j.register_node(0);
  j.everyone_heartbeats(100);
  const uint64_t before = j.job.generation;
  ASSERT_EQ(j.report_exit(kLearner1, 0, 9, 200), "");
  EXPECT_EQ(j.job.generation, before + 1);
  auto rendezvous = j.peers.of(Kind::RENDEZVOUS);
  ASSERT_EQ(rendezvous.size(), 1u) << "the lost learner is restarted, not sent a rendezvous";
  EXPECT_EQ(rendezvous[0].id, control::actor_identity(wire::Role::LEARNER, 0));
  EXPECT_EQ(rendezvous[0].resume_from_step, j.job.generation_resume_step);
  j.heartbeat(kLearner0, 100, 300, before);
  EXPECT_EQ(j.peers.of(Kind::RENDEZVOUS).size(), 2u) << "a heartbeat of the old generation";
  j.heartbeat(kLearner0, 100, 400);
  EXPECT_EQ(j.peers.of(Kind::RENDEZVOUS).size(), 2u) << "a heartbeat of the current one";
}

// When the stage's learners have exited, the actors that served it are stopped (an actor
// failing meanwhile is not restarted), then the next stage is placed and started.
TEST(StageRunner, TheNextStageBeginsOnceTheLearnersAreDoneAndTheRestStopped) {
  SupervisedJob j(
      job_toml("restart_backoff_ms = 10\ndrain_timeout_s = 5\n", 1, "\"pretrain\", \"probe\""));
  j.register_node(0);
  j.everyone_heartbeats(100);
  ASSERT_EQ(j.report_exit(kLearner0, 0, 0, 200), "");
  EXPECT_EQ(j.actor(kLearner0).phase, Phase::kExited);
  j.tick(250);
  EXPECT_TRUE(j.stages.stage_ending());
  EXPECT_EQ(j.job.stage(), "pretrain") << "the data actor still runs";
  const auto shutdowns = j.peers.of(Kind::SHUTDOWN);
  ASSERT_EQ(shutdowns.size(), 1u);
  EXPECT_EQ(shutdowns[0].id, control::actor_identity(wire::Role::DATA, 0));

  ASSERT_EQ(j.report_exit(kData0, 0, 9, 300), "");
  EXPECT_EQ(j.actor(kData0).phase, Phase::kFailed) << "no restart while the stage ends";
  const uint64_t generation = j.job.generation;
  j.tick(350);
  EXPECT_FALSE(j.stages.stage_ending());
  EXPECT_EQ(j.job.stage(), "probe");
  EXPECT_EQ(j.job.state, JobPhase::kRunning);
  EXPECT_EQ(j.job.generation, generation + 1) << "the new stage's learners form a new group";
  ASSERT_TRUE(j.job.actors.count(kLearner0));
  EXPECT_EQ(j.actor(kLearner0).assignment.stage, "probe");
  EXPECT_EQ(j.actor(kLearner0).phase, Phase::kPending);
  const size_t starts = j.commands(kLearner0, true).size();
  j.everyone_heartbeats(400);
  j.tick(450);
  EXPECT_EQ(j.commands(kLearner0, true).size(), starts + 1) << "the probe's learner starts";
  EXPECT_EQ(j.actor(kLearner0).phase, Phase::kStarting);
}

// After the last stage the job finishes: its agent is told to stop, and the loop ends once
// the agent has left and status lingered status_linger_ms.
TEST(StageRunner, TheJobFinishesAfterItsLastStage) {
  SupervisedJob j(job_toml("status_linger_ms = 500\n"));
  j.register_node(0);
  j.everyone_heartbeats(100);
  ASSERT_EQ(j.report_exit(kData0, 0, 0, 150), "");
  ASSERT_EQ(j.report_exit(kLearner0, 0, 0, 200), "");
  j.tick(300);
  EXPECT_EQ(j.job.state, JobPhase::kFinished);
  const auto shutdowns = j.peers.of(Kind::SHUTDOWN);
  ASSERT_EQ(shutdowns.size(), 1u);
  EXPECT_EQ(shutdowns[0].id, control::agent_identity("a")) << "the agent is told to stop";
  j.everyone_heartbeats(700);
  j.tick(900);
  EXPECT_FALSE(j.stages.done()) << "the agent has not left";

  capnp::MallocMessageBuilder m;
  auto ev = m.initRoot<wire::ActorEvent>();
  ev.setRole(wire::Role::AGENT);
  ev.setState(wire::ActorState::EXITED);
  ASSERT_EQ(j.supervisor.on_agent_event(j.job.nodes.at("a"), ev.asReader(), 950), "");
  j.tick(950);
  EXPECT_TRUE(j.stages.done()) << "the agent left and status lingered 500 ms";
}

}  // namespace
}  // namespace saccade::coordinator
