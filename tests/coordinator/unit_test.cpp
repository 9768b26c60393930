// The runtime's pieces without processes: placement, the state store, key
// files, endpoints, status formats, checkpoint chunking and the checkpoint service.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "control/checkpoint_transfer.h"
#include "control/control.h"
#include "control/placement.h"
#include "coordinator/checkpoint_service.h"
#include "coordinator/job_state.h"
#include "coordinator/state_store.h"
#include "coordinator/status.h"
#include "tests/coordinator/json.h"
#include "tests/coordinator/recording_peers.h"
#include "tests/support/temp_dir.h"

namespace saccade::coordinator {
namespace {

namespace fs = std::filesystem;

JobConfig two_nodes() {
  return parse_config(
      "[cluster]\ndata_port_base = 9000\n"
      "[[cluster.nodes]]\nname = \"a\"\nhost = \"ha\"\ndata_actors = 3\nlearners = 1\ngpus = 2\n"
      "[[cluster.nodes]]\nname = \"b\"\nhost = \"hb\"\ndata_actors = 1\nlearners = 1\n",
      "test.toml");
}

TEST(Placement, RanksFollowNodeOrderAndDataFeedsLearners) {
  const auto actors = control::place_actors(two_nodes(), "pretrain");
  ASSERT_EQ(actors.size(), 6u);
  std::map<std::pair<wire::Role, int>, control::Assignment> by;
  for (const control::Assignment& a : actors) by[{a.role, a.rank}] = a;
  EXPECT_EQ(by.at({wire::Role::DATA, 2}).node, "a");
  EXPECT_EQ(by.at({wire::Role::DATA, 3}).node, "b");
  EXPECT_EQ(by.at({wire::Role::DATA, 3}).local_rank, 0);
  EXPECT_EQ(by.at({wire::Role::DATA, 3}).endpoint, "tcp://hb:9003");
  EXPECT_EQ(by.at({wire::Role::LEARNER, 0}).device, "cuda:0");
  EXPECT_EQ(by.at({wire::Role::LEARNER, 1}).device, "cpu");
  // Data d feeds learner d % 2: learner 0 gets data 0 and 2, learner 1 gets 1 and 3; over
  // ipc when both are on one node, over tcp across nodes.
  const JobConfig config = two_nodes();
  EXPECT_EQ(control::data_ipc_endpoint(config, 3), "ipc:///tmp/saccade/saccade-7100/data-3");
  EXPECT_EQ(by.at({wire::Role::DATA, 3}).local_endpoint, control::data_ipc_endpoint(config, 3));
  EXPECT_EQ(by.at({wire::Role::LEARNER, 0}).peers,
            (std::vector<std::string>{control::data_ipc_endpoint(config, 0),
                                      control::data_ipc_endpoint(config, 2)}));
  EXPECT_EQ(by.at({wire::Role::LEARNER, 1}).peers,
            (std::vector<std::string>{"tcp://ha:9001", control::data_ipc_endpoint(config, 3)}));
  JobConfig no_ipc = two_nodes();
  no_ipc.cluster.ipc_dir = "";
  for (const control::Assignment& a : control::place_actors(no_ipc, "pretrain"))
    for (const std::string& p : a.peers) EXPECT_EQ(p.rfind("tcp://", 0), 0u) << p;
  no_ipc.cluster.ipc_dir = "/" + std::string(200, 'x');  // longer than a Unix socket path
  EXPECT_EQ(control::data_ipc_endpoint(no_ipc, 0), "");
  EXPECT_TRUE(control::completes_stage("pretrain", wire::Role::LEARNER));
  EXPECT_FALSE(control::completes_stage("pretrain", wire::Role::DATA));
  EXPECT_FALSE(control::completes_stage("policy", wire::Role::ROLLOUT));
}

TEST(Placement, RolloutActorsBindTheirPortsAndFeedThePolicyLearner) {
  const std::string nodes =
      "[cluster]\nrollout_port_base = 9100\n"
      "[[cluster.nodes]]\nname = \"a\"\nhost = \"ha\"\ndata_actors = 0\nlearners = 1\n"
      "rollout_actors = 1\n"
      "[[cluster.nodes]]\nname = \"b\"\nhost = \"hb\"\ndata_actors = 0\nlearners = 0\n"
      "rollout_actors = 2\n";
  const auto actors =
      control::place_actors(parse_config("[job]\nstages = [\"policy\"]\n" + nodes, "t"), "policy");
  ASSERT_EQ(actors.size(), 4u);
  std::map<std::pair<wire::Role, int>, control::Assignment> by;
  for (const control::Assignment& a : actors) by[{a.role, a.rank}] = a;
  EXPECT_EQ(by.at({wire::Role::ROLLOUT, 0}).endpoint, "tcp://ha:9100");
  EXPECT_EQ(by.at({wire::Role::ROLLOUT, 2}).endpoint, "tcp://hb:9102");
  EXPECT_EQ(by.at({wire::Role::ROLLOUT, 2}).local_rank, 1);
  EXPECT_EQ(by.at({wire::Role::LEARNER, 0}).peers,
            (std::vector<std::string>{"tcp://ha:9100", "tcp://hb:9101", "tcp://hb:9102"}));
}

// Each stage places only its own actors: the probe, the policy learner and the
// eval leader run in learner 0's slot, rollout actors only in the policy stage,
// eval actors only in the eval stage (on the rollout actors' ports).
TEST(Placement, EachStagePlacesItsOwnActors) {
  const JobConfig config = parse_config(
      "[job]\nstages = [\"pretrain\", \"probe\", \"policy\", \"eval\"]\n"
      "[cluster]\nrollout_port_base = 9100\n"
      "[[cluster.nodes]]\nname = \"a\"\ndata_actors = 2\nlearners = 2\nrollout_actors = 1\n"
      "[[cluster.nodes]]\nname = \"b\"\nhost = \"10.0.0.2\"\ndata_actors = 1\nlearners = 1\n"
      "rollout_actors = 2\neval_actors = 2\n",
      "t");
  auto roles = [&](const std::string& stage) {
    std::vector<std::string> out;
    for (const control::Assignment& a : control::place_actors(config, stage)) {
      EXPECT_EQ(a.stage, stage);
      out.push_back(fmt::format("{}{}@{}", control::role_name(a.role), a.rank, a.node));
    }
    return out;
  };
  EXPECT_EQ(roles("pretrain"), (std::vector<std::string>{"data0@a", "data1@a", "learner0@a",
                                                         "learner1@a", "data2@b", "learner2@b"}));
  EXPECT_EQ(roles("probe"), (std::vector<std::string>{"learner0@a"}));
  EXPECT_EQ(roles("eval"), (std::vector<std::string>{"learner0@a", "eval0@b", "eval1@b"}));
  const std::vector<control::Assignment> eval = control::place_actors(config, "eval");
  EXPECT_EQ(eval[0].peers,
            (std::vector<std::string>{"tcp://10.0.0.2:9100", "tcp://10.0.0.2:9101"}));
  EXPECT_EQ(eval[2].endpoint, "tcp://10.0.0.2:9101");
  EXPECT_EQ(roles("policy"),
            (std::vector<std::string>{"learner0@a", "rollout0@a", "rollout1@b", "rollout2@b"}));
  for (const control::Assignment& a : control::place_actors(config, "policy")) {
    if (a.role == wire::Role::LEARNER) {
      EXPECT_EQ(a.peers.size(), 3u);  // every rollout actor, no data actor
    }
  }
}

TEST(StateStore, WritesSurviveReopening) {
  const testing::TempDir dir("unit");
  {
    StateStore s(dir.path() / "db");
    s.put({{"job/id", "x"}, {"actor/data/0", "1 2 3 4"}, {"actor/data/1", "5"}});
    EXPECT_EQ(s.get("job/id"), "x");
    EXPECT_FALSE(s.get("nothing"));
  }
  StateStore again(dir.path() / "db");
  EXPECT_EQ(again.get("job/id"), "x");
  const auto actors = again.scan("actor/");
  ASSERT_EQ(actors.size(), 2u);
  EXPECT_EQ(actors.at("actor/data/0"), "1 2 3 4");
}

// A stage's end may find its actors' last changes not yet written (an exit
// handled in the same loop turn): advancing writes them under that stage's
// keys, places the next stage's actors, and a reload resumes at the new stage.
TEST(JobState, AdvancingAStageKeepsTheEndingStagesRecords) {
  const testing::TempDir dir("unit");
  const JobConfig config = parse_config(
      "[job]\nstages = [\"pretrain\", \"probe\"]\n"
      "[[cluster.nodes]]\nname = \"a\"\ndata_actors = 1\nlearners = 1\n",
      "t");
  StateStore store(dir.path() / "coordinator.db");
  {
    JobState job(config, store, 0);
    job.load(0);
    ASSERT_EQ(job.actors.size(), 2u);
    for (auto& [key, a] : job.actors) {
      a.phase = Phase::kExited;
      a.step = 7;
      job.mark(a);  // not flushed yet
    }
    ASSERT_TRUE(job.advance_stage(10));
    EXPECT_EQ(job.stage(), "probe");
    ASSERT_EQ(job.actors.size(), 1u);
    EXPECT_EQ(job.actors.begin()->second.assignment.stage, "probe");
    EXPECT_EQ(job.actors.begin()->second.phase, Phase::kPending);
  }
  EXPECT_EQ(store.get("actor/pretrain/data/0"), fmt::format("{} 0 0 7", int(Phase::kExited)));
  JobState again(config, store, 0);
  again.load(0);
  EXPECT_EQ(again.stage_index, 1u);
  EXPECT_EQ(again.status(0).stages.at(0).state, "finished");
  EXPECT_EQ(again.status(0).stages.at(1).state, "running");
  EXPECT_FALSE(again.advance_stage(20)) << "probe is the last stage";
}

TEST(StateStore, ALockedDatabaseIsAClearError) {
  const testing::TempDir dir("unit");
  StateStore first(dir.path() / "db");
  try {
    StateStore second(dir.path() / "db");
    FAIL() << "two coordinators opened one database";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(Keys, GeneratedFilesReadBackAndSecretsArePrivate) {
  const testing::TempDir dir("unit");
  control::write_key_files(dir.path());
  const control::CurveKeys server = control::read_key_file(dir.path() / "server.key", true);
  EXPECT_EQ(server.public_key.size(), 40u);
  EXPECT_EQ(server.secret_key.size(), 40u);
  const control::CurveKeys pub = control::read_key_file(dir.path() / "server.pub", false);
  EXPECT_EQ(pub.public_key, server.public_key);
  EXPECT_TRUE(pub.secret_key.empty());
  EXPECT_EQ(fs::status(dir.path() / "client.key").permissions() & fs::perms::others_read,
            fs::perms::none);
  EXPECT_THROW(control::read_key_file(dir.path() / "server.pub", true), std::runtime_error);
  std::ofstream(dir.path() / "bad.key") << "public = \"tooshort\"\n";
  EXPECT_THROW(control::read_key_file(dir.path() / "bad.key", false), std::runtime_error);
  EXPECT_THROW(control::read_key_file(dir.path() / "missing.key", false), std::runtime_error);
}

TEST(Endpoints, HostPortIsCheckedWithTheOptionName) {
  EXPECT_EQ(control::tcp_endpoint("10.0.0.1:7100", "--coordinator"), "tcp://10.0.0.1:7100");
  for (const char* bad : {"nohost", ":7100", "host:", "host:99999", "host:7x"}) {
    try {
      control::tcp_endpoint(bad, "--coordinator");
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--coordinator: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(control::role_from_name("painter"), std::invalid_argument);
  EXPECT_EQ(control::role_from_name("learner"), wire::Role::LEARNER);
}

JobStatus sample() {
  JobStatus s;
  s.job_id = "j\"1";
  s.stage = "pretrain";
  s.state = "running";
  s.step = 7;
  s.loss = NAN;
  s.lr = 0.001;
  s.knn = 0.715;
  s.target_entropy_ratio = 0.875;
  s.prototypes_used = NAN;
  s.metrics = {{"rollout_s", 1.5}, {"update_s", 0.25}};
  s.actors.push_back({"learner", 0, "n\n0", 42, "running", 12, 1, 7, 3.5, true});
  s.nodes.push_back({"n0", "h", 2, 0, 1 << 20, "registered", 3});
  return s;
}

TEST(Status, SurvivesTheWireAndPrintsAsJsonTableAndPrometheus) {
  capnp::MallocMessageBuilder b;
  write_status(sample(), b.initRoot<wire::StatusReply>());
  const JobStatus back = read_status(b.getRoot<wire::StatusReply>().asReader());
  EXPECT_EQ(back.job_id, "j\"1");
  ASSERT_EQ(back.actors.size(), 1u);
  EXPECT_EQ(back.actors[0].state, "running");
  EXPECT_TRUE(back.actors[0].straggler);
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_EQ(back.knn, 0.715);
  EXPECT_EQ(back.target_entropy_ratio, 0.875);
  EXPECT_TRUE(std::isnan(back.prototypes_used));
  EXPECT_EQ(back.metrics, sample().metrics);

  const auto json = testing::Json::parse(status_json(back));
  EXPECT_EQ(json.at("metrics").at("update_s").get<double>(), 0.25);
  EXPECT_EQ(json.at("job").get<std::string>(), "j\"1");
  EXPECT_TRUE(json.at("loss").is_null());
  EXPECT_EQ(json.at("knn").get<double>(), 0.715);
  EXPECT_EQ(json.at("target_entropy_ratio").get<double>(), 0.875);
  EXPECT_TRUE(json.at("prototypes_used").is_null());
  EXPECT_EQ(json.at("actors")[0].at("node").get<std::string>(), "n\n0");
  EXPECT_TRUE(json.at("actors")[0].at("straggler").get<bool>());
  EXPECT_NE(status_table(back).find("learner"), std::string::npos);
  EXPECT_NE(status_table(back).find("learning: k-NN 71.5%  target entropy 0.875 ln K  prototypes "
                                    "in use -"),
            std::string::npos)
      << status_table(back);
  // A stage index from the wire prints whatever its value (fuzz_frame found INT32_MAX + 1).
  JobStatus odd = back;
  odd.stage_index = std::numeric_limits<int32_t>::max();
  EXPECT_NE(status_table(odd).find("stage 2147483648/"), std::string::npos) << status_table(odd);
  const std::string prom = status_prometheus(back);
  EXPECT_NE(prom.find("saccade_step{job=\"j\\\"1\"} 7"), std::string::npos) << prom;
  EXPECT_EQ(prom.find("saccade_loss"), std::string::npos) << "unknown values are left out";
  EXPECT_NE(prom.find("saccade_knn_top1{job=\"j\\\"1\"} 0.715"), std::string::npos) << prom;
  EXPECT_EQ(prom.find("saccade_prototypes_used"), std::string::npos) << prom;
  EXPECT_NE(prom.find("node=\"n\\n0\"} 1"), std::string::npos) << prom;
}

// TFLOP/s and MFU come from the learners' metrics: the job's images/s times their FLOPs
// per image, and their MFU; both are left out (dashes, null, no gauge) until reported.
TEST(Status, ShowsTheJobsTflopsAndMfuOnceLearnersReportThem) {
  JobStatus s = sample();
  s.images_per_second = 500;
  EXPECT_TRUE(std::isnan(job_tflops(s)));
  EXPECT_NE(status_table(s).find("compute: TFLOP/s -  MFU -"), std::string::npos)
      << status_table(s);
  EXPECT_EQ(status_prometheus(s).find("saccade_mfu"), std::string::npos);
  s.metrics["flop_per_image"] = 2.5e11;
  s.metrics["mfu"] = 0.125;
  capnp::MallocMessageBuilder b;
  write_status(s, b.initRoot<wire::StatusReply>());
  const JobStatus back = read_status(b.getRoot<wire::StatusReply>().asReader());
  EXPECT_DOUBLE_EQ(job_tflops(back), 125.0);
  EXPECT_DOUBLE_EQ(job_mfu(back), 0.125);
  EXPECT_NE(status_table(back).find("compute: TFLOP/s 125.00  MFU 12.5%"), std::string::npos)
      << status_table(back);
  const auto json = testing::Json::parse(status_json(back));
  EXPECT_DOUBLE_EQ(json.at("tflops").get<double>(), 125.0);
  EXPECT_DOUBLE_EQ(json.at("mfu").get<double>(), 0.125);
  const std::string prom = status_prometheus(back);
  EXPECT_NE(prom.find("saccade_tflops{job=\"j\\\"1\"} 125"), std::string::npos) << prom;
  EXPECT_NE(prom.find("saccade_mfu{job=\"j\\\"1\"} 0.125"), std::string::npos) << prom;
}

TEST(DropLog, CountsEverythingButLogsAtMostOncePerPeriod) {
  control::DropLog log(std::chrono::hours(1));
  for (int i = 0; i < 1000; ++i) log.refused("peer", "frame of " + std::to_string(i) + " bytes");
  EXPECT_EQ(log.total(), 1000u);
}

// Chunks of a checkpoint as the wire carries them (each its own message).
std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> chunk_messages(
    const control::Blobs& blobs, int64_t step, size_t chunk_bytes) {
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> out;
  control::for_each_chunk(blobs, chunk_bytes, [&](const control::ChunkView& c) {
    out.push_back(std::make_unique<capnp::MallocMessageBuilder>());
    control::write_chunk(step, c, out.back()->initRoot<wire::CheckpointChunk>());
  });
  return out;
}

wire::CheckpointChunk::Reader reader(capnp::MallocMessageBuilder& m) {
  return m.getRoot<wire::CheckpointChunk>().asReader();
}

TEST(CheckpointTransfer, ChunksReassembleExactlyAndCorruptionIsRefused) {
  std::string big(10000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  const control::Blobs blobs{{"empty", ""}, {"student", big}, {"trainer", "42"}};
  EXPECT_EQ(control::checkpoint_chunk_bytes(1 << 30), size_t{4} << 20);
  EXPECT_EQ(control::checkpoint_chunk_bytes(2048), 1024u);

  auto chunks = chunk_messages(blobs, 7, 1024);
  ASSERT_EQ(chunks.size(), 1u + 10u + 1u);  // an empty blob is one empty chunk
  const uint64_t total = big.size() + 2;
  control::CheckpointAssembler whole;
  for (auto& c : chunks) {
    EXPECT_FALSE(whole.complete(total));  // the last chunk is still missing
    ASSERT_EQ(whole.add(reader(*c), 1 << 20), "");
  }
  EXPECT_FALSE(whole.complete(total + 1));  // a whole blob lost in transit
  ASSERT_TRUE(whole.complete(total));
  EXPECT_EQ(whole.step(), 7);
  EXPECT_EQ(whole.bytes(), total);
  EXPECT_EQ(whole.take(), blobs);

  control::CheckpointAssembler reordered;  // chunk 3 of "student" before chunk 2
  std::swap(chunks[3], chunks[4]);
  std::string why;
  for (auto& c : chunks)
    if (why.empty()) why = reordered.add(reader(*c), 1 << 20);
  EXPECT_NE(why.find("out of order"), std::string::npos) << why;
  EXPECT_FALSE(reordered.complete(total));

  auto flipped = chunk_messages(blobs, 7, 1024);  // one byte of the payload changed
  flipped[5]->getRoot<wire::CheckpointChunk>().getData()[17] ^= 1;
  control::CheckpointAssembler corrupt;
  why.clear();
  for (auto& c : flipped)
    if (why.empty()) why = corrupt.add(reader(*c), 1 << 20);
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;

  control::CheckpointAssembler small;  // over the size limit
  why.clear();
  for (auto& c : chunk_messages(blobs, 7, 1024))
    if (why.empty()) why = small.add(reader(*c), 5000);
  EXPECT_NE(why.find("exceeds"), std::string::npos) << why;
}

// A sender that starts the same checkpoint again (its coordinator restarted
// mid-transfer) replaces the partial blobs instead of failing as out of order.
// A request's names come from a peer: its description stays one short line however many
// names, and however long, it holds.
TEST(CheckpointTransfer, AQueryIsDescribedInOneShortLine) {
  control::CheckpointQuery q;
  q.step = 7;
  q.source = wire::CheckpointSource::INPUT_CHECKPOINT;
  q.blobs = {"teacher"};
  EXPECT_EQ(control::describe(q), "checkpoint 7 (teacher) of the stage's input");
  q.blobs.assign(5000, std::string(5000, 'x'));
  q.blobs[0] = "student";
  const std::string line = control::describe(q);
  EXPECT_LT(line.size(), 400u) << line;
  EXPECT_EQ(line.find("checkpoint 7 (student, xxx"), 0u) << line;
  EXPECT_NE(line.find("... and 4996 more) of the stage's input"), std::string::npos) << line;
}

TEST(CheckpointTransfer, ASecondSendOfTheSameStepReplacesThePartialOne) {
  std::string big(10000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 5 + 1);
  const control::Blobs blobs{{"state", "step 7"}, {"student", big}};
  auto first = chunk_messages(blobs, 7, 1024);
  auto again = chunk_messages(blobs, 7, 1024);
  ASSERT_EQ(first.size(), 1u + 10u);
  control::CheckpointAssembler assembler;
  // A stale tail first (the end of "student" only: refused, it has no start), then the first
  // attempt's start, then the whole checkpoint again.
  EXPECT_NE(assembler.add(reader(*first[9]), 1 << 20), "");
  for (size_t i = 0; i < 6; ++i) ASSERT_EQ(assembler.add(reader(*first[i]), 1 << 20), "");
  for (auto& c : again) ASSERT_EQ(assembler.add(reader(*c), 1 << 20), "");
  ASSERT_TRUE(assembler.complete(big.size() + 6));
  EXPECT_EQ(assembler.bytes(), big.size() + 6);  // the partial bytes are not counted twice
  EXPECT_EQ(assembler.take(), blobs);
}

TEST(CheckpointTransfer, ADownloadSendsEveryChunkThenTheCommitAndSharesItsBlobs) {
  std::string big(5000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 + 1);
  auto blobs =
      std::make_shared<const control::Blobs>(control::Blobs{{"student", big}, {"trainer", "7"}});
  control::CheckpointDownload download(12, blobs, 1000);
  EXPECT_EQ(download.blobs().get(), blobs.get());  // no copy of the checkpoint per learner
  EXPECT_EQ(download.chunks(), 5u + 1u);
  EXPECT_EQ(download.bytes(), big.size() + 1);
  control::CheckpointAssembler assembler;
  int messages = 0;
  while (!download.done()) {
    capnp::MallocMessageBuilder m;
    auto body = m.initRoot<wire::Envelope>().initBody();
    download.next(body);
    if (body.isCheckpointChunk()) {
      ASSERT_EQ(assembler.add(body.getCheckpointChunk().asReader(), 1 << 20), "");
    } else {
      ASSERT_TRUE(body.isCheckpointCommitted()) << "chunks, then the commit marker";
      EXPECT_EQ(body.getCheckpointCommitted().getStep(), 12);
      EXPECT_TRUE(assembler.complete(body.getCheckpointCommitted().getBytes()));
    }
    download.advance();  // the socket took it
    ++messages;
  }
  EXPECT_EQ(messages, 7);
  EXPECT_EQ(assembler.take(), *blobs);
}

// Learner 0 uploads `blobs` as checkpoint `step`: chunks, then the commit marker (the same
// messages a download sends); `between` runs after each chunk (other peers' messages
// arriving meanwhile). Returns the first refusal, "" when every message was taken.
std::string upload(CheckpointService& service, const std::string& id, const control::Blobs& blobs,
                   int64_t step, uint64_t& seq, const std::function<void()>& between = {}) {
  control::CheckpointDownload messages(step, std::make_shared<const control::Blobs>(blobs), 1024);
  while (!messages.done()) {
    capnp::MallocMessageBuilder m;
    auto e = m.initRoot<wire::Envelope>();
    e.setSeq(++seq);
    e.setGeneration(1);
    messages.next(e.getBody());
    messages.advance();
    const std::string why = service.on_upload(id, ActorKey{wire::Role::LEARNER, 0}, e.asReader());
    if (!why.empty()) return why;
    if (between && !messages.done()) between();
  }
  return "";
}

// Learner 0 opens an upload of `blobs` as checkpoint `step` with its manifest. Returns the
// refusal, "" when taken.
std::string send_manifest(CheckpointService& service, const std::string& id,
                          const control::Blobs& blobs, int64_t step, uint64_t& seq) {
  capnp::MallocMessageBuilder m;
  auto e = m.initRoot<wire::Envelope>();
  e.setSeq(++seq);
  e.setGeneration(1);
  control::write_manifest(step, control::digest_blobs(blobs), e.getBody().initCheckpointManifest());
  return service.on_upload(id, ActorKey{wire::Role::LEARNER, 0}, e.asReader());
}

// A checkpoint service over a real store on disk, for a job of two learners.
struct ServiceHarness {
  // Waits (up to 5 s) for the commit under way to finish and be answered.
  void finish() {
    for (int i = 0; i < 500 && service.busy(); ++i) {
      service.finish_commit();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const testing::TempDir dir{"unit"};
  const JobConfig config =
      parse_config("[[cluster.nodes]]\nname = \"a\"\ndata_actors = 2\nlearners = 2\n", "t");
  StateStore store{dir.path() / "coordinator.db"};
  JobState job{config, store, 0};
  StageInputs inputs{config, store.checkpoints("pretrain"), dir.path() / "coordinator.db"};
  RecordingPeers peers;
  CheckpointService service{config, job, store, inputs, peers};
};

// A learner that saw the coordinator restart sends its checkpoint again, and the restarted
// coordinator can get both copies: the second lands while the first is still being written.
// It must be answered by that write (CI once failed Runtime.KilledCoordinatorResumesFromItsDatabase
// with "checkpoint 40 is still being committed"); another step is still refused meanwhile.
TEST(CheckpointService, ASecondUploadOfTheStepBeingCommittedIsAnsweredNotRefused) {
  ServiceHarness h;
  h.job.load(0);
  const control::Blobs blobs{{"student", std::string(5000, 'x')}, {"trainer", "step 40"}};
  uint64_t seq = 0;
  ASSERT_EQ(upload(h.service, "learner-0", blobs, 40, seq), "");
  ASSERT_TRUE(h.service.busy());  // finish_commit() not called yet: the write is "under way"
  EXPECT_EQ(upload(h.service, "learner-0-again", blobs, 40, seq), "");
  const std::string other = upload(h.service, "learner-0-again", blobs, 50, seq);
  EXPECT_NE(other.find("checkpoint 40 is still being committed"), std::string::npos) << other;
  h.finish();
  ASSERT_FALSE(h.service.busy());
  int committed = 0, refusals = 0;
  for (const auto& s : h.peers.sent) {
    if (s.committed) {
      ++committed;
      EXPECT_EQ(s.step, 40);
      EXPECT_EQ(s.id, "learner-0-again") << "the newest upload is the one answered";
    } else if (!s.ok) {
      ++refusals;
      EXPECT_NE(s.error.find("still being committed"), std::string::npos) << s.error;
    }
  }
  EXPECT_EQ(committed, 1);
  EXPECT_EQ(refusals, 1) << "only step 50 is refused";
  EXPECT_EQ(h.job.checkpoint_step, 40);
  ASSERT_TRUE(h.store.checkpoints("pretrain").latest());
  EXPECT_EQ(h.store.checkpoints("pretrain").latest()->step, 40);
}

// Learner 0 sends a checkpoint the store already holds (it saw the coordinator restart after
// the first copy was committed, before the answer): the manifest is answered at once from
// the store, the chunks that follow are dropped without a second commit, and an upload of the
// same step with other bytes is taken and committed as usual.
TEST(CheckpointService, AnUploadOfACommittedCheckpointIsAnsweredFromTheStoreWithoutItsChunks) {
  ServiceHarness h;
  h.job.load(0);
  const control::Blobs blobs{{"student", std::string(5000, 'x')}, {"trainer", "step 40"}};
  uint64_t seq = 0;
  ASSERT_EQ(send_manifest(h.service, "learner-0", blobs, 40, seq), "");
  EXPECT_TRUE(h.peers.sent.empty()) << "nothing committed yet: the chunks must follow";
  ASSERT_EQ(upload(h.service, "learner-0", blobs, 40, seq), "");
  h.finish();
  ASSERT_EQ(h.peers.sent.size(), 1u);
  const auto first = h.store.checkpoints("pretrain").info(40);
  ASSERT_TRUE(first);

  ASSERT_EQ(send_manifest(h.service, "learner-0-again", blobs, 40, seq), "");
  ASSERT_EQ(h.peers.sent.size(), 2u) << "the manifest alone is answered";
  EXPECT_TRUE(h.peers.sent[1].committed);
  EXPECT_EQ(h.peers.sent[1].step, 40);
  EXPECT_EQ(h.peers.sent[1].id, "learner-0-again");
  EXPECT_EQ(upload(h.service, "learner-0-again", blobs, 40, seq), "");  // the tail in flight
  EXPECT_FALSE(h.service.busy()) << "no second write";
  EXPECT_EQ(h.peers.sent.size(), 2u) << "the dropped chunks are neither answered nor refused";
  EXPECT_EQ(h.store.checkpoints("pretrain").info(40)->meta, first->meta) << "not re-committed";

  control::Blobs other = blobs;
  other["student"][17] = 'y';  // same names and sizes, other bytes
  ASSERT_EQ(send_manifest(h.service, "learner-0", other, 40, seq), "");
  EXPECT_EQ(h.peers.sent.size(), 2u) << "another checkpoint 40: its chunks must follow";
  ASSERT_EQ(upload(h.service, "learner-0", other, 40, seq), "");
  h.finish();
  ASSERT_EQ(h.peers.sent.size(), 3u);
  EXPECT_TRUE(h.peers.sent[2].committed);
  EXPECT_EQ(read_blobs(h.store.checkpoints("pretrain"), 40, {}), other);
}

// The previous coordinator process committed checkpoint 12 and died before recording it in
// the job state: answering the resend from the store records it.
TEST(CheckpointService, AnAnswerFromTheStoreRecordsACommitTheJobStateMissed) {
  ServiceHarness h;
  h.job.load(0);
  const control::Blobs blobs{{"student", std::string(3000, 'z')}, {"trainer", "step 12"}};
  h.store.checkpoints("pretrain").commit(12, blobs, {{"time_ns", "123456789"}});
  ASSERT_LT(h.job.checkpoint_step, 12);
  uint64_t seq = 0;
  ASSERT_EQ(send_manifest(h.service, "learner-0", blobs, 12, seq), "");
  ASSERT_EQ(h.peers.sent.size(), 1u);
  EXPECT_TRUE(h.peers.sent[0].committed);
  EXPECT_EQ(h.job.checkpoint_step, 12);
  EXPECT_EQ(h.job.checkpoint_bytes, 3007u);
  EXPECT_EQ(h.job.checkpoint_time_ns, 123456789);
  // A manifest from another learner is refused like its chunks would be.
  capnp::MallocMessageBuilder m;
  auto e = m.initRoot<wire::Envelope>();
  e.setGeneration(1);
  control::write_manifest(12, control::digest_blobs(blobs), e.getBody().initCheckpointManifest());
  EXPECT_NE(h.service.on_upload("other", ActorKey{wire::Role::LEARNER, 1}, e.asReader())
                .find("only learner 0"),
            std::string::npos);
}

// Chunks from another learner or an older generation are refused, each with its reason, but
// leave learner 0's upload in progress whole: it still commits.
TEST(CheckpointService, ForeignChunksAreRefusedWithoutVoidingTheUploadInProgress) {
  ServiceHarness h;
  h.job.load(0);
  std::string big(5000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 11 + 5);
  const control::Blobs blobs{{"student", big}, {"trainer", "step 7"}};
  std::vector<std::string> foreign;
  uint64_t seq = 0;
  const auto interleave = [&] {
    for (const auto& [key, generation] : {std::pair{ActorKey{wire::Role::LEARNER, 1}, 1},
                                          std::pair{ActorKey{wire::Role::LEARNER, 0}, 0}}) {
      capnp::MallocMessageBuilder m;
      auto e = m.initRoot<wire::Envelope>();
      e.setSeq(1000 + foreign.size());
      e.setGeneration(generation);
      control::for_each_chunk(control::Blobs{{"student", "stale"}}, 1024,
                              [&](const control::ChunkView& c) {
                                control::write_chunk(3, c, e.getBody().initCheckpointChunk());
                              });
      foreign.push_back(h.service.on_upload("other", key, e.asReader()));
    }
  };
  ASSERT_EQ(upload(h.service, "learner-0", blobs, 7, seq, interleave), "");
  ASSERT_GE(foreign.size(), 4u);
  for (size_t i = 0; i < foreign.size(); ++i)
    EXPECT_NE(foreign[i].find(i % 2 == 0 ? "only learner 0" : "stale generation 0"),
              std::string::npos)
        << foreign[i];
  h.finish();
  EXPECT_EQ(h.job.checkpoint_step, 7);
  EXPECT_EQ(read_blobs(h.store.checkpoints("pretrain"), 7, {}), blobs);
}

}  // namespace
}  // namespace saccade::coordinator
