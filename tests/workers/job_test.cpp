// Whole pretraining jobs with the real actor bodies: coordinator, agents as
// simulated nodes, data actors and learner actors (LibTorch, Gloo) as real
// processes on 127.0.0.1, checkpoints streamed into the coordinator's RocksDB.
// The model is tiny (depth 1, width 32) so a step takes milliseconds; what is
// under test is the runtime around it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "common/config.h"
#include "dataloader/idx_dataset.h"
#include "model/safetensors.h"
#include "storage/checkpoint_store.h"
#include "storage/rollout_store.h"
#include "tests/coordinator/runtime_fixture.h"
#include "tests/support/subprocess.h"

namespace saccade::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string node(const std::string& name, int data_actors, int learners) {
  return fmt::format("name = \"{}\"\nhost = \"127.0.0.1\"\ndata_actors = {}\nlearners = {}", name,
                     data_actors, learners);
}

// Student weights of checkpoint `step` as one flat vector (tensors in name order).
std::vector<float> student_weights(const storage::CheckpointStore& db, int64_t step) {
  const std::string blob = db.read(step, "student");
  std::vector<float> flat;
  for (const auto& [name, t] : model::parse_safetensors(blob)) {
    EXPECT_EQ(t.dtype, model::DType::kF32) << name;
    const size_t n = t.data.size() / sizeof(float);
    const size_t at = flat.size();
    flat.resize(at + n);
    std::memcpy(flat.data() + at, t.data.data(), n * sizeof(float));
  }
  return flat;
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::pow(double(a[i]) - b[i], 2);
  return std::sqrt(sum);
}

// Samples the listening TCP sockets of every process the test started, every
// 100 ms, until destroyed: what a job listens on, stage by stage.
class ListenerSampler {
 public:
  ListenerSampler()
      : thread_([this] {
          while (!stop_) {
            for (pid_t pid : descendants())
              for (Listener& l : listening_sockets(pid)) {
                std::lock_guard lock(mutex_);
                seen_.emplace(l.describe(), std::move(l));
              }
            std::this_thread::sleep_for(100ms);
          }
        }) {}
  ~ListenerSampler() {
    stop_ = true;
    thread_.join();
  }
  std::vector<Listener> seen() {
    std::lock_guard lock(mutex_);
    std::vector<Listener> out;
    for (const auto& [key, l] : seen_) out.push_back(l);
    return out;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::map<std::string, Listener> seen_;  // by what it is, so each is kept once
  std::thread thread_;
};

// The value after `flag` in a command line ("" when absent).
std::string argument(const std::string& command, const std::string& flag) {
  const size_t at = command.find(" " + flag + " ");
  if (at == std::string::npos) return "";
  const size_t from = at + flag.size() + 2;
  return command.substr(from, command.find(' ', from) - from);
}

class Job : public RuntimeFixture {
 protected:
  void SetUp() override {
    // 64 random 28 x 28 images as gzipped IDX files, readable from every "node".
    std::vector<uint8_t> pixels(64 * 28 * 28), labels(64);
    std::mt19937 rng(3);
    for (auto& p : pixels) p = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i % 10);
    data::write_idx_images((dir_.path() / "images.idx.gz").string(), 64, 28, 28, pixels, true);
    data::write_idx_labels((dir_.path() / "labels.idx.gz").string(), labels, true);
  }

  // `job` (a tiny_job of 4 steps) run to its end as `saccade run` under `name`, with its one
  // checkpoint at step 4: the student's weights there.
  std::vector<float> student_after_four_steps(const std::string& name, TestJob job) {
    job.checkpoint_every = 4;
    job.status_linger_ms = 0;
    const fs::path config = dir_.path() / (name + ".toml");
    std::ofstream(config) << job_toml(job, dir_.path() / name);
    Child& r = start(name, {build_path("saccade"), "run", config.string()});
    EXPECT_EQ(r.wait(180s), 0) << name;
    auto db = open_db(dir_.path() / name);
    EXPECT_EQ(verify_checkpoints(*db), (std::set<int64_t>{4})) << name;
    return student_weights(*db, 4);
  }

  // A real pretraining job of `steps` steps with a global batch of `batch`.
  TestJob tiny_job(std::vector<std::string> nodes, int steps, int batch) {
    TestJob job;
    job.name = "job-test";
    job.port = free_port();
    job.steps = steps;
    job.nodes = std::move(nodes);
    job.status_linger_ms = 3000;
    job.heartbeat_misses = 40;  // 2 s: LibTorch processes on a loaded 2-core machine
    job.stall_timeout_s = 20;
    job.cluster_extra =
        "collective_timeout_s = 20\nrendezvous_timeout_s = 60\ncheckpoint_timeout_s = 20\n"
        "keep_checkpoints = 1000\n";
    job.batch_size = batch;
    job.ssl_extra = "head_prototypes = 32\nhead_hidden = 32\nhead_bottleneck = 8\nthreads = 1\n";
    job.extra = fmt::format(
        "[data]\ndataset = \"idx\"\nchannels = 1\npixel_mean = [0.5]\npixel_std = [0.25]\n"
        "idx_images = \"{}\"\nidx_labels = \"{}\"\nloader_threads = 1\n"
        "[model]\npatch_size = 4\ndepth = 1\nwidth = 32\nheads = 2\nn_state = 2\n"
        "pos_mlp_hidden = 16\n"
        "[views]\nmultizoom_patches = 2\nfovea_grid = 2\nglimpses = 2\nglobal_grid = 3\n"
        "local_grid = 2\nlocal_views = 1\n",
        (dir_.path() / "images.idx.gz").string(), (dir_.path() / "labels.idx.gz").string());
    return job;
  }

  std::unique_ptr<storage::CheckpointStore> open_db(const fs::path& work) const {
    return storage::CheckpointStore::open((work / "coordinator.db").string());
  }

  // Every committed checkpoint reads back whole (CRC-checked) with all the
  // parts a resume needs; returns their steps.
  static std::set<int64_t> verify_checkpoints(const storage::CheckpointStore& db) {
    std::set<int64_t> steps;
    for (const storage::CheckpointInfo& c : db.list()) {
      std::map<std::string, std::string> blobs;
      EXPECT_NO_THROW(blobs = db.read_all(c.step)) << "checkpoint " << c.step;
      for (const char* part : {"student", "teacher", "optimizer", "trainer"})
        EXPECT_TRUE(blobs.count(part)) << "checkpoint " << c.step << " lacks " << part;
      for (float w : student_weights(db, c.step)) {
        if (!std::isfinite(w)) {
          ADD_FAILURE() << "checkpoint " << c.step << " holds a non-finite weight";
          break;
        }
      }
      steps.insert(c.step);
    }
    return steps;
  }
};

TEST_F(Job, TwoNodesTrainToTheBudgetAndExportTheBackbone) {
  TestJob job = tiny_job({node("n0", 1, 1), node("n1", 1, 1)}, 6, 8);
  job.checkpoint_every = 3;
  const fs::path config = write_config(job);
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");
  Child& a1 = agent(config, job.port, "n1");
  auto done = wait_status(config, finished, 180s);
  ASSERT_TRUE(done) << "the job did not finish";
  for (int rank : {0, 1}) {
    const Json& l = *actor(*done, "learner", rank);
    EXPECT_EQ(l.at("step").get<double>(), 6);
    EXPECT_EQ(l.at("restarts").get<double>(), 0);
    EXPECT_EQ(l.at("node").get<std::string>(), rank == 0 ? "n0" : "n1");
  }
  EXPECT_EQ((*done).at("generation").get<double>(), 1);
  EXPECT_EQ((*done).at("last_checkpoint_step").get<double>(), 6);
  EXPECT_TRUE(std::isfinite((*done).at("loss").get<double>()));
  EXPECT_GT((*done).at("loss").get<double>(), 0);
  EXPECT_EQ(coord.wait(30s), 0);
  EXPECT_EQ(a0.wait(20s), 0);
  EXPECT_EQ(a1.wait(20s), 0);

  auto db = open_db(work_dir());
  EXPECT_EQ(verify_checkpoints(*db), (std::set<int64_t>{3, 6}));
  EXPECT_GT(distance(student_weights(*db, 3), student_weights(*db, 6)), 0) << "nothing trained";
  db.reset();  // the export opens it

  const fs::path out = dir_.path() / "backbone.safetensors";
  const ProcessResult exported =
      run_process({build_path("saccade"), "export", config.string(), "--out", out.string()}, 120s);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::ifstream in(out, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(model::parse_safetensors(bytes).size(), 4u);
}

// Sinkhorn-Knopp and the gradient average are global, so splitting a batch
// over two learners changes only the order of floating-point sums (KoLeo is
// per rank, hence off).
TEST_F(Job, TwoLearnersWithBatchBMatchOneLearnerWithBatch2B) {
  auto train = [&](const std::string& name, int data_actors, int learners) {
    TestJob job = tiny_job({node("local", data_actors, learners)}, 4, 8);
    job.checkpoint_every = 2;
    job.status_linger_ms = 0;
    job.ssl_extra += "koleo_weight = 0\nwarmup_epochs = 0\n";
    const fs::path config = dir_.path() / (name + ".toml");
    std::ofstream(config) << job_toml(job, dir_.path() / name);
    Child& r = start(name, {build_path("saccade"), "run", config.string()});
    EXPECT_EQ(r.wait(180s), 0) << name;
    auto db = open_db(dir_.path() / name);
    EXPECT_EQ(verify_checkpoints(*db), (std::set<int64_t>{2, 4})) << name;
    return std::pair{student_weights(*db, 2), student_weights(*db, 4)};
  };
  const auto [one2, one4] = train("one-learner", 1, 1);
  const auto [two2, two4] = train("two-learners", 2, 2);
  ASSERT_FALSE(one4.empty());
  const double moved = distance(one2, one4);  // what two steps of training change
  ASSERT_GT(moved, 0);
  std::cerr << "two steps moved the student by " << moved << "; 2 x b vs 1 x 2b differ by "
            << distance(one2, two2) << " at step 2, " << distance(one4, two4) << " at step 4\n";
  EXPECT_LT(distance(one2, two2), 1e-3 * moved);
  EXPECT_LT(distance(one4, two4), 1e-3 * moved);
}

// Two learners over Gloo, the gradients' all-reduce overlapped with backward or run after
// it: the same buckets summed the same way, so the same weights, bit for bit.
TEST_F(Job, OverlappingTheAllReduceWithBackwardTrainsTheSameWeights) {
  auto train = [&](const std::string& name, bool overlap) {
    TestJob job = tiny_job({node("local", 2, 2)}, 4, 8);
    job.ssl_extra += fmt::format("overlap_all_reduce = {}\n", overlap);
    return student_after_four_steps(name, job);
  };
  const std::vector<float> overlapped = train("overlapped", true);
  const std::vector<float> after = train("after-backward", false);
  ASSERT_FALSE(overlapped.empty());
  EXPECT_EQ(overlapped, after);
}

// views.cut_on = "learner" across real processes: the data actor ships images and boxes, the
// learner cuts; the weights are those of the job whose data actor cuts, bit for bit.
TEST_F(Job, ViewsCutOnTheLearnerTrainTheSameWeights) {
  auto train = [&](const std::string& name, const std::string& cut_on) {
    TestJob job = tiny_job({node("local", 1, 1)}, 4, 8);
    job.extra += fmt::format("cut_on = \"{}\"\nship_max_side = 64\n", cut_on);  // [views]
    return student_after_four_steps(name, job);
  };
  const std::vector<float> data_cuts = train("data-cuts", "data");
  const std::vector<float> learner_cuts = train("learner-cuts", "learner");
  ASSERT_FALSE(data_cuts.empty());
  EXPECT_EQ(data_cuts, learner_cuts);
}

TEST_F(Job, KilledLearnerDataActorAndCoordinatorLoseNoCommittedCheckpoint) {
  TestJob job = tiny_job({node("n0", 1, 1), node("n1", 1, 1)}, 300, 8);
  job.checkpoint_every = 10;
  const fs::path config = write_config(job);
  Child* coord = &coordinator(config);
  agent(config, job.port, "n0");
  agent(config, job.port, "n1");
  std::set<int64_t> seen;  // checkpoint steps the coordinator reported committed
  auto watch = [&](const std::function<bool(const Json&)>& pred, std::chrono::seconds timeout) {
    return wait_status(
        config,
        [&](const Json& s) {
          if (s.at("last_checkpoint_step").get<double>() > 0)
            seen.insert(static_cast<int64_t>(s.at("last_checkpoint_step").get<double>()));
          return pred(s);
        },
        timeout);
  };
  auto learner_step = [](const Json& s) {
    return (*actor(s, "learner", 0)).at("step").get<double>();
  };
  std::mt19937 rng(std::random_device{}());

  for (auto [role, rank] : {std::pair{"learner", 1}, std::pair{"data", 0}}) {
    auto s = watch([&](const Json& j) { return all_running(j) && learner_step(j) >= 2; }, 120s);
    ASSERT_TRUE(s) << "not training before killing " << role << " " << rank;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 800));
    s = status(config);
    ASSERT_TRUE(s);
    const double step = learner_step(*s);
    const pid_t pid = static_cast<pid_t>((*actor(*s, role, rank)).at("pid").get<double>());
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    const auto killed = std::chrono::steady_clock::now();
    auto again = watch(
        [&](const Json& j) {
          const Json& a = *actor(j, role, rank);
          return a.at("restarts").get<double>() == 1 && a.at("pid").get<double>() != pid &&
                 all_running(j) && learner_step(j) > step;
        },
        120s);
    ASSERT_TRUE(again) << role << " " << rank << " killed at step " << step
                       << ": training did not resume";
    std::cerr << role << " " << rank << " killed at step " << step << ": training again after "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
              << " s\n";
  }
  EXPECT_EQ((*status(config)).at("generation").get<double>(),
            2);  // the lost learner: one re-rendezvous

  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 800));
  coord->signal(SIGKILL);
  EXPECT_EQ(coord->wait(10s), 128 + SIGKILL);
  std::this_thread::sleep_for(500ms);
  coord = &coordinator(config, "coordinator-restarted");
  auto done = watch(finished, 240s);
  if (!done) {  // where it stood, for a failure seen once under CI load (the logs follow)
    const std::optional<Json> last = status(config);
    FAIL() << "the job did not finish after the coordinator restart; last status: "
           << (last ? last->dump() : "none");
  }
  for (int rank : {0, 1}) EXPECT_EQ((*actor(*done, "learner", rank)).at("step").get<double>(), 300);
  EXPECT_EQ(coord->wait(30s), 0);

  auto db = open_db(work_dir());
  const std::set<int64_t> committed = verify_checkpoints(*db);
  for (int64_t step : seen) EXPECT_TRUE(committed.count(step)) << "checkpoint " << step << " lost";
  EXPECT_TRUE(committed.count(300)) << "no final checkpoint";
  EXPECT_GE(seen.size(), 2u) << "the test saw too few commits to mean anything";
}

TEST_F(Job, SigtermDrainsWithAFinalCheckpoint) {
  TestJob job = tiny_job({node("local", 1, 1)}, 100000, 8);
  job.checkpoint_every = 100000;             // only the drain commits
  job.ssl_extra += "peak_tflops = 0.001\n";  // a CPU has no table entry: MFU needs a peak
  const fs::path config = write_config(job);
  Child& r = run(config);
  auto s = wait_status(
      config,
      [](const Json& j) {
        const Json* l = actor(j, "learner", 0);
        return l && (*l).at("step").get<double>() >= 3 && j.at("mfu").is_number();
      },
      120s);
  ASSERT_TRUE(s) << "never trained 3 steps with the learner's MFU in status";
  // The learner's compute figures reach status: the job's TFLOP/s are its images/s times
  // the learner's FLOPs per image, and MFU is the learner's share of the configured peak.
  const Json& metrics = (*s).at("metrics");
  ASSERT_TRUE(metrics.contains("flop_per_image")) << metrics;
  EXPECT_GT(metrics.at("flop_per_image").get<double>(), 0);
  EXPECT_DOUBLE_EQ((*s).at("tflops").get<double>(), (*s).at("images_per_second").get<double>() *
                                                        metrics.at("flop_per_image").get<double>() /
                                                        1e12);
  EXPECT_DOUBLE_EQ((*s).at("mfu").get<double>(), metrics.at("tflops").get<double>() / 0.001);
  const int64_t reported =
      static_cast<int64_t>((*actor(*s, "learner", 0)).at("step").get<double>());
  r.signal(SIGTERM);
  EXPECT_EQ(r.wait(60s), 4) << "a drain before the budget is a pause, not the end";
  EXPECT_NE(r.log().find("job drained"), std::string::npos);
  int64_t drained_at = 0;
  {
    auto db = open_db(work_dir());
    const std::set<int64_t> committed = verify_checkpoints(*db);
    ASSERT_EQ(committed.size(), 1u) << "exactly the drain's checkpoint";
    drained_at = *committed.begin();
    EXPECT_GE(drained_at, reported);
  }
  // The next launch (here with a budget 2 steps past the drain) resumes the real
  // learner from the drain's checkpoint and finishes.
  job.steps = static_cast<int>(drained_at) + 2;
  write_config(job);
  Child& again = run(config, {}, "run-resumed");
  EXPECT_EQ(again.wait(120s), 0);
  EXPECT_NE(again.log().find(fmt::format("resumed from checkpoint {}", drained_at)),
            std::string::npos);
  EXPECT_NE(again.log().find("job finished"), std::string::npos);
}

// A policy job on n0 (the policy learner and a rollout actor) and n1 (a
// rollout actor), against a backbone pretrained and probed in one process
// first; `policy` holds its [policy] keys. Returns the config.
fs::path prepare_policy_job(TestJob& job, const fs::path& dir, const fs::path& work,
                            const std::string& policy) {
  // The training images double as the validation split ([data] keys).
  job.extra.insert(job.extra.find("loader_threads"),
                   fmt::format("val_idx_images = \"{0}/images.idx.gz\"\n"
                               "val_idx_labels = \"{0}/labels.idx.gz\"\n",
                               dir.string()));
  job.extra += "[probe]\nbatch_size = 16\ncs = [1.0]\nglimpses = 2\n[policy]\n" + policy +
               "blocks = 1\nwidth = 16\nheads = 2\nmixtures = 2\ngroup_size = 3\n"
               "steps = 2\nupdates = 2\n";
  const std::string pre = (dir / "pretrain.toml").string();
  std::ofstream(pre) << job_toml(job, work);
  const std::string saccade = build_path("saccade");
  const ProcessResult pretrained = run_process({saccade, "pretrain", pre, "--steps", "4"}, 300s);
  EXPECT_EQ(pretrained.exit_code, 0) << pretrained.err;
  const ProcessResult probed = run_process({saccade, "probe", pre}, 300s);
  EXPECT_EQ(probed.exit_code, 0) << probed.err;

  const char* node_toml =
      "name = \"{}\"\nhost = \"127.0.0.1\"\ndata_actors = 0\nlearners = {}\n"
      "rollout_actors = 1";
  job.nodes = {fmt::format(fmt::runtime(node_toml), "n0", 1),
               fmt::format(fmt::runtime(node_toml), "n1", 0)};
  job.cluster_extra += fmt::format("rollout_port_base = {}\n", free_ports(2));
  std::string toml = job_toml(job, work);
  toml.replace(toml.find("stages = [\"pretrain\"]"), 21, "stages = [\"policy\"]");
  const fs::path config = dir / "policy.toml";
  std::ofstream(config) << toml;
  return config;
}

// The whole pipeline as one job of the real bodies: pretraining (data actor +
// learner), the probe in learner 0's slot, GRPO on a policy learner and a
// rollout actor, then the evaluation led from learner 0's slot with its
// glimpse traces on an eval actor, each stage reading the one before over the wire.
// All four stages as one `saccade run`, under CURVE, with two learners on two nodes
// of their own addresses (127.0.0.1 and 127.0.0.2), data, rollout and eval actors and
// the Prometheus port: every socket any process of the job listens on is on the
// address the config gives its node (the coordinator's: coordinator_host), none on
// every interface, and the learners meet through the coordinator, with no store port.
TEST_F(Job, EveryStageRunsAsOneJob) {
  TestJob job = tiny_job({}, 4, 8);
  job.extra.insert(job.extra.find("loader_threads"),
                   fmt::format("val_idx_images = \"{0}/images.idx.gz\"\n"
                               "val_idx_labels = \"{0}/labels.idx.gz\"\n",
                               dir_.path().string()));
  job.extra +=
      "[probe]\nbatch_size = 16\ncs = [1.0]\nglimpses = 2\nhead = \"transformer\"\nhead_steps = "
      "20\nbaselines = [\"random_init\", \"supervised\"]\nsupervised_steps = 3\n"
      "[policy]\nepochs = 1\nbatch_size = 16\n"
      "blocks = 1\nwidth = 16\nheads = 2\nmixtures = 2\ngroup_size = 3\nsteps = 2\nupdates = 2\n"
      "[eval]\nglimpses = 3\nimages = 24\nscales = [1.0, 2.0]\nsweep_images = 8\n";
  job.nodes = {node("n0", 1, 1) + "\nrollout_actors = 1\neval_actors = 1",
               "name = \"n1\"\nhost = \"127.0.0.2\"\ndata_actors = 1\nlearners = 1"};
  job.stages = {"pretrain", "probe", "policy", "eval"};
  const int rollout_port = free_ports(1);
  job.cluster_extra += fmt::format("rollout_port_base = {}\n", rollout_port);
  job.metrics_port = free_port();
  const fs::path keys = dir_.path() / "keys";
  ASSERT_EQ(run_process({build_path("saccade"), "keys", "generate", keys.string()}).exit_code, 0);
  job.extra += fmt::format(
      "[security]\ncurve = true\nserver_key = \"{0}/server.key\"\n"
      "server_public_key = \"{0}/server.pub\"\nclient_key = \"{0}/client.key\"\n",
      keys.string());
  const fs::path config = write_config(job);
  const JobConfig resolved = load_config(config.string());
  std::optional<ListenerSampler> sampler;
  sampler.emplace();
  Child& run_all = run(config, {}, "run-all-stages");
  EXPECT_EQ(run_all.wait(600s), 0) << run_all.log();
  const std::vector<Listener> listeners = sampler->seen();
  sampler.reset();
  const std::string log = run_all.log();

  // Every listener where the config puts it; each configured port seen in use.
  std::set<std::string> covered;
  for (const Listener& l : listeners) {
    const std::string what = l.describe();
    EXPECT_NE(l.address, "0.0.0.0") << what;
    EXPECT_NE(l.address, "::") << what;
    if (l.command.find(" coordinator ") != std::string::npos) {
      EXPECT_EQ(l.address, "127.0.0.1") << what;
      EXPECT_TRUE(l.port == job.port || l.port == job.metrics_port) << what;
      covered.insert(l.port == job.port ? "control" : "metrics");
      continue;
    }
    const std::string role = argument(l.command, "--role"), rank = argument(l.command, "--rank");
    ASSERT_FALSE(role.empty()) << "only the coordinator and actors listen: " << what;
    const std::string node = argument(l.command, "--node");
    EXPECT_EQ(l.address, node == "n1" ? "127.0.0.2" : "127.0.0.1") << what;
    if (role == "data") {
      EXPECT_EQ(l.port, resolved.cluster.data_port_base + std::stoi(rank)) << what;
    } else if (role == "rollout" || role == "eval") {
      EXPECT_EQ(l.port, rollout_port + std::stoi(rank)) << what;
    } else {
      // A learner listens only for its collective library's pairs (Gloo), on its node's address.
      EXPECT_EQ(role, "learner") << what;
    }
    covered.insert(role + " " + rank);
  }
  for (const char* port : {"control", "metrics", "data 0", "data 1", "rollout 0", "eval 0"})
    EXPECT_TRUE(covered.count(port)) << port << " never seen listening";
  // Generation 1 unless a learner was restarted (a missed heartbeat on a loaded machine,
  // under a sanitizer): then the two joined in a later one.
  EXPECT_TRUE(std::regex_search(log, std::regex("generation [0-9]+: joined 2 learners over gloo")))
      << log;
  for (const char* what :
       {"stage pretrain finished", "stage 2/4 probe begins", "stage probe finished",
        "stage 3/4 policy begins", "stage policy finished", "stage 4/4 eval begins",
        "probe done: head for checkpoint 4 committed", "eval: glimpse traces on 1 eval actor(s)",
        "eval done: report for checkpoint 4 committed (24 images, 8 in the sweep)",
        "eval actor stops: "})
    EXPECT_NE(log.find(what), std::string::npos) << what << "\n" << log;
  // The probe's head went to the policy stage from the probe stage's store.
  auto probe = storage::CheckpointStore::open((work_dir() / "probe-checkpoints.db").string());
  ASSERT_TRUE(probe->info(4));
  EXPECT_EQ(probe->read(4, "probe_head.safetensors").size(),
            fs::file_size(work_dir() / "probe_head.safetensors"));
  // The transformer head (probe.head) is what the probe wrote and what rewarded the policy.
  model::Metadata head_meta;
  const model::RawTensorMap head_tensors =
      model::parse_safetensors(probe->read(4, "probe_head.safetensors"), &head_meta);
  EXPECT_EQ(head_meta["format"], "saccade.transformer_probe");
  EXPECT_EQ(head_meta["checkpoint_step"], "4");
  for (const char* name : {"task.query", "task.input_mean", "vit.query", "vit.linear.weight"})
    EXPECT_TRUE(head_tensors.count(name)) << name << ": ViT mode gets a transformer head too";
  std::ifstream report_file(work_dir() / "policy.json");
  const auto report = nlohmann::json::parse(report_file);
  EXPECT_EQ(report["checkpoint_step"], 4) << report;
  EXPECT_EQ(report["task_head"], "transformer") << report;
  std::ifstream probe_file(work_dir() / "probe.json");
  const auto probed = nlohmann::json::parse(probe_file);
  EXPECT_EQ(probed["rows"][1]["name"], "pretrained/transformer_head") << probed;
  EXPECT_TRUE(probed["rows"][1]["vit_knn"].is_null()) << "no k-NN for a head";
  // The supervised baseline was trained by the probe actor and probed beside the others.
  EXPECT_EQ(probed["supervised"]["steps"], 3) << probed;
  bool supervised_row = false;
  for (const auto& row : probed["rows"]) supervised_row |= row["name"] == "supervised";
  EXPECT_TRUE(supervised_row) << probed;
  EXPECT_TRUE(fs::exists(work_dir() / "supervised" / "checkpoints.db"));
  // The eval stage read the policy stage's policy and committed its report.
  auto eval = storage::CheckpointStore::open((work_dir() / "eval-checkpoints.db").string());
  ASSERT_TRUE(eval->info(4));
  const auto evaluated = nlohmann::json::parse(eval->read(4, "eval.json"));
  std::vector<std::string> modes;
  for (const auto& c : evaluated["curves"]) modes.push_back(c["mode"]);
  EXPECT_EQ(modes, (std::vector<std::string>{"vit", "random", "scan", "fixed_path", "policy"}))
      << evaluated;
  EXPECT_EQ(evaluated["curves"][4]["accuracy"].size(), 3u) << evaluated;
  // The learned fixed path came from the policy stage's last checkpoint: one path.
  for (const auto& d : evaluated["curves"][3]["gaze_spread"]) EXPECT_LT(d.get<double>(), 1e-5);
  EXPECT_EQ(evaluated["task_head"], "transformer") << evaluated;
  EXPECT_EQ(evaluated["sweep"].size(), 12u) << evaluated;  // 2 scales x (5 modes + fixed patch)
  verify_checkpoints(*open_db(work_dir()));  // pretraining's, untouched by the later stages
}

// Every rollout batch is split across both rollout actors.
TEST_F(Job, PolicyStageTrainsOnRolloutActorsOfTwoNodes) {
  TestJob job = tiny_job({node("n0", 1, 1)}, 4, 8);
  const fs::path config = prepare_policy_job(
      job, dir_.path(), work_dir(), "epochs = 1\nbatch_size = 16\nkeep_rollout_batches = 3\n");
  ASSERT_FALSE(HasFailure());
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");
  Child& a1 = agent(config, job.port, "n1");
  auto done = wait_status(config, finished, 300s);
  ASSERT_TRUE(done) << "the policy job did not finish";
  EXPECT_EQ((*done).at("stage").get<std::string>(), "policy");
  // 1 epoch of the policy, then 1 of the learned fixed path (policy.fixed_path_baseline).
  EXPECT_EQ((*actor(*done, "learner", 0)).at("step").get<double>(), 2);
  for (int rank : {0, 1}) {
    const Json& r = *actor(*done, "rollout", rank);
    EXPECT_EQ(r.at("node").get<std::string>(), rank == 0 ? "n0" : "n1");
    EXPECT_EQ(r.at("restarts").get<double>(), 0);
  }
  EXPECT_EQ(coord.wait(30s), 0);
  EXPECT_EQ(a0.wait(20s), 0);
  EXPECT_EQ(a1.wait(20s), 0);
  // The learner and both rollout actors got the head and the backbone from the coordinator.
  const std::string coord_log = coord.log();
  for (const char* what : {"input file(s) (probe_head.safetensors) sent to",
                           "checkpoint 4 (teacher) of the stage's input sent to"}) {
    size_t n = 0;
    for (size_t at = coord_log.find(what); at != std::string::npos;
         at = coord_log.find(what, at + 1))
      ++n;
    EXPECT_EQ(n, 3u) << what << "\n" << coord_log;
  }
  // Both actors served, 16 parts in all: 4 batches of each policy in 2 parts, each part to
  // the least loaded connected actor (the status may predate their last report: read their logs).
  int total = 0;
  for (Child* a : {&a0, &a1}) {
    const std::string log = a->log();
    const std::string mark = "rollout actor stops: ";
    const size_t at = log.find(mark);
    ASSERT_NE(at, std::string::npos) << log;
    const int served = std::stoi(log.substr(at + mark.size()));
    EXPECT_GT(served, 0) << log;
    total += served;
  }
  EXPECT_EQ(total, 16);

  std::ifstream report_file(work_dir() / "policy.json");
  const auto report = nlohmann::json::parse(report_file);
  EXPECT_EQ(report["checkpoint_step"], 4) << report;
  EXPECT_EQ(report["train_images"], 64) << report;
  EXPECT_EQ(report["scan_accuracy"].size(), 2u) << report;  // the fixed scan path, per glimpse
  ASSERT_EQ(report["fixed_path_accuracy"].size(), 2u) << report;
  for (const auto& spread : report["fixed_path_gaze_spread"])
    EXPECT_LT(spread.get<double>(), 1e-5) << report;
  EXPECT_TRUE(fs::exists(work_dir() / "policy.safetensors"));
  // 64 images in batches of 16: the policy's versions 0..3, then the fixed path's
  // 2^40 + 0..3 on the same actors; the newest 3 kept, 16 images each.
  constexpr uint64_t kFixed = uint64_t{1} << 40;
  auto rollouts = storage::RolloutStore::open((work_dir() / "rollouts.db").string(), 0);
  EXPECT_EQ(rollouts->versions(), (std::vector<uint64_t>{kFixed + 1, kFixed + 2, kFixed + 3}));
  EXPECT_EQ(rollouts->read(kFixed + 3).size(), 16u);
}

// kill -9 of the policy learner: the coordinator restarts it, it resumes GRPO
// from its last committed checkpoint (policy and AdamW state), and the job finishes.
TEST_F(Job, KilledPolicyLearnerResumesFromItsCheckpoint) {
  TestJob job = tiny_job({node("n0", 1, 1)}, 4, 8);
  const fs::path config = prepare_policy_job(
      job, dir_.path(), work_dir(),
      "epochs = 6\nbatch_size = 8\ncheckpoint_every_batches = 4\nkeep_rollout_batches = 2\n");
  ASSERT_FALSE(HasFailure());
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");
  Child& a1 = agent(config, job.port, "n1");
  auto s = wait_status(
      config, [](const Json& j) { return j.at("last_checkpoint_step").get<double>() >= 8; }, 300s);
  ASSERT_TRUE(s) << "no checkpoint after 8 rollout batches\n" << a0.log();
  const auto pid = static_cast<pid_t>((*actor(*s, "learner", 0)).at("pid").get<double>());
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  auto done = wait_status(config, finished, 300s);
  ASSERT_TRUE(done) << "the policy job did not finish after the kill\n" << a0.log();
  EXPECT_EQ((*actor(*done, "learner", 0)).at("restarts").get<double>(), 1);
  // 6 epochs x 8 batches of the policy, then as many of the learned fixed path.
  EXPECT_EQ((*done).at("last_checkpoint_step").get<double>(), 96);
  EXPECT_EQ(coord.wait(30s), 0);
  EXPECT_EQ(a0.wait(20s), 0);
  EXPECT_EQ(a1.wait(20s), 0);
  const std::string log = a0.log();
  const std::string mark = "policy learner resumes after ";
  const size_t at = log.find(mark);
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_GE(std::stoll(log.substr(at + mark.size())), 8);
  EXPECT_TRUE(fs::exists(work_dir() / "policy.json"));
}

// kill -9 of an eval actor mid-evaluation: the coordinator restarts it, the
// eval leader sends its part again, and the report is the one `saccade eval`
// measures in one process.
TEST_F(Job, KilledEvalActorIsRestartedAndTheReportIsUnchanged) {
  TestJob job = tiny_job({node("n0", 1, 1)}, 4, 8);
  job.extra +=
      "[eval]\nglimpses = 4\nimages = 64\nbatch_size = 1\nscales = [1.0, 3.0]\n"
      "sweep_images = 64\n";
  const fs::path policy_config =
      prepare_policy_job(job, dir_.path(), work_dir(), "epochs = 1\nbatch_size = 16\n");
  ASSERT_FALSE(HasFailure());
  const std::string saccade = build_path("saccade");
  const ProcessResult trained = run_process({saccade, "policy", policy_config.string()}, 300s);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const ProcessResult measured = run_process({saccade, "eval", policy_config.string()}, 300s);
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  std::ifstream one_process_file(work_dir() / "eval.json");
  const auto one_process = nlohmann::json::parse(one_process_file);
  fs::remove(work_dir() / "eval.json");

  // The same evaluation as a job: an eval actor on each node, silence noticed within 3 s.
  std::ifstream policy_toml(policy_config);
  std::string toml((std::istreambuf_iterator<char>(policy_toml)), std::istreambuf_iterator<char>());
  toml.replace(toml.find("stages = [\"policy\"]"), 19, "stages = [\"eval\"]");
  const std::string eval_actor = "eval_actors = 1\n";
  for (size_t at = toml.find("rollout_actors = 1"); at != std::string::npos;
       at = toml.find("rollout_actors = 1", at + eval_actor.size() + 1))
    toml.insert(at, eval_actor);
  toml.insert(toml.find("[policy]\n") + 9, "rollout_timeout_ms = 3000\n");
  const fs::path config = dir_.path() / "eval.toml";
  std::ofstream(config) << toml;
  Child& coord = coordinator(config);
  Child& a0 = agent(config, job.port, "n0");
  Child& a1 = agent(config, job.port, "n1");
  auto s = wait_status(
      config,
      [](const Json& j) {
        const Json* leader = actor(j, "learner", 0);
        return j.at("stage").get<std::string>() == "eval" && leader && actor(j, "eval", 0) &&
               (*leader).at("step").get<double>() >= 20;  // 20 of 896 batches evaluated
      },
      300s);
  ASSERT_TRUE(s) << "the evaluation did not get going\n" << a0.log();
  const auto pid = static_cast<pid_t>((*actor(*s, "eval", 0)).at("pid").get<double>());
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  auto done = wait_status(config, finished, 300s);
  ASSERT_TRUE(done) << "the eval job did not finish after the kill\n" << a0.log();
  EXPECT_EQ((*actor(*done, "eval", 0)).at("restarts").get<double>(), 1);
  EXPECT_EQ(coord.wait(30s), 0);
  EXPECT_EQ(a0.wait(20s), 0);
  EXPECT_EQ(a1.wait(20s), 0);
  EXPECT_NE(a0.log().find("eval: glimpse traces on 2 eval actor(s)"), std::string::npos)
      << a0.log();
  auto eval = storage::CheckpointStore::open((work_dir() / "eval-checkpoints.db").string());
  ASSERT_TRUE(eval->info(4));
  const auto as_job = nlohmann::json::parse(eval->read(4, "eval.json"));
  // Every trace draws from its image's seed: the actors, killed or not, measure the same.
  EXPECT_EQ(as_job["curves"], one_process["curves"]);
  ASSERT_EQ(as_job["sweep"].size(), one_process["sweep"].size());
  for (size_t i = 0; i < as_job["sweep"].size(); ++i)
    EXPECT_EQ(as_job["sweep"][i]["accuracy"], one_process["sweep"][i]["accuracy"]) << i;
}

// SIGTERM in the policy stage drains the policy learner with a final
// checkpoint (policy and AdamW state); the next launch resumes GRPO from it.
TEST_F(Job, SigtermInThePolicyStageDrainsAndTheNextLaunchResumesIt) {
  TestJob job = tiny_job({node("n0", 1, 1)}, 4, 8);
  const fs::path config =
      prepare_policy_job(job, dir_.path(), work_dir(),
                         "epochs = 60\nbatch_size = 8\ncheckpoint_every_batches = 10000\n");
  ASSERT_FALSE(HasFailure());
  Child& r = run(config);
  auto s = wait_status(
      config,
      [](const Json& j) {
        const Json* l = actor(j, "learner", 0);
        // An epoch of 8 rollout batches, and its figures (they follow the step's heartbeat).
        return l && (*l).at("step").get<double>() >= 1 && j.at("metrics").contains("update_s");
      },
      300s);
  ASSERT_TRUE(s) << "no policy epoch with its figures in status\n" << r.log();
  // The policy learner's epoch: where its time went.
  const Json& metrics = (*s).at("metrics");
  ASSERT_TRUE(metrics.contains("rollout_s")) << metrics;
  EXPECT_GT(metrics.at("rollout_s").get<double>(), 0);
  EXPECT_GT(metrics.at("update_s").get<double>(), 0);
  r.signal(SIGTERM);
  EXPECT_EQ(r.wait(120s), 4) << r.log();  // drained: a pause, not the end
  int64_t drained_at = -1;
  {
    auto store = storage::CheckpointStore::open((work_dir() / "policy-checkpoints.db").string());
    ASSERT_TRUE(store->latest()) << "the drain committed no policy checkpoint\n" << r.log();
    drained_at = store->latest()->step;
    EXPECT_GE(drained_at, 8);
    EXPECT_LT(drained_at, 480);
    EXPECT_FALSE(store->read(drained_at, "optimizer").empty());
  }
  EXPECT_FALSE(fs::exists(work_dir() / "policy.json"));  // nothing evaluated yet
  Child& again = run(config, {}, "run-resumed");
  EXPECT_EQ(again.wait(300s), 0) << again.log();
  EXPECT_NE(
      again.log().find(fmt::format("policy learner resumes after {} rollout batches", drained_at)),
      std::string::npos)
      << again.log();
  auto store = storage::CheckpointStore::open((work_dir() / "policy-checkpoints.db").string());
  // 60 epochs x 8 batches of the policy, then the learned fixed path's checkpoint.
  EXPECT_EQ(store->latest()->step, 960);
  EXPECT_TRUE(store->info(480)) << "the policy's last checkpoint";
  EXPECT_FALSE(store->read(960, "policy_fixed_path.safetensors").empty());
  EXPECT_TRUE(fs::exists(work_dir() / "policy.json"));
}

}  // namespace
}  // namespace saccade::testing
