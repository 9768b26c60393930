// The actor executable of the runtime tests: the real actor runtime with
// torch-free bodies. Learners wait for their rendezvous, meet through the
// coordinator's rendezvous store as c10d's rendezvous does, resume from the
// committed checkpoint step, count steps to ssl.epochs * ssl.steps_per_epoch
// and commit a (tiny, real) checkpoint file every ssl.checkpoint_every_steps
// (twice, the same bytes both times, with SACCADE_TEST_RECOMMIT set);
// data actors count steps until drained. Faults come from SACCADE_TEST_FAULT
// ("role[@stage]:rank:step:mode[:once];...", mode crash | stall | stop | slow; slow:
// a step that takes 120 s and ignores drains, as a long training step does).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "control/control.h"
#include "control/placement.h"
#include "tests/coordinator/harness.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::testing {
namespace {

using runtime::ActorBody;
using runtime::ActorContext;

int step_ms() {
  const char* v = std::getenv("SACCADE_TEST_STEP_MS");
  return v ? std::atoi(v) : 10;
}

size_t checkpoint_bytes() {
  const char* v = std::getenv(kCheckpointBytesVariable);
  return v ? std::stoull(v) : 3000;
}

// Applies the fault planned for this actor at this step, if any.
void maybe_fault(ActorContext& ctx, int64_t step) {
  const char* plan = std::getenv("SACCADE_TEST_FAULT");
  if (!plan) return;
  std::istringstream faults(plan);
  for (std::string fault; std::getline(faults, fault, ';');) {
    std::vector<std::string> f;
    std::istringstream parts(fault);
    for (std::string p; std::getline(parts, p, ':');) f.push_back(p);
    // "role" or "role@stage": a fault of one stage's actor only.
    const std::string who = control::role_name(ctx.assignment().role);
    if (f.size() < 4 || (f[0] != who && f[0] != who + "@" + ctx.assignment().stage) ||
        std::stoi(f[1]) != ctx.assignment().rank || std::stoll(f[2]) != step)
      continue;
    if (f.size() > 4 && f[4] == "once" && ctx.restarts() > 0) continue;
    fmt::print(stderr, "test fault {} at step {}\n", f[3], step);
    if (f[3] == "crash") _exit(7);
    if (f[3] == "refuse") _exit(control::kExitInputRefused);  // its inputs cannot be used
    if (f[3] == "stop") raise(SIGSTOP);  // the whole process freezes: a hard hang
    if (f[3] == "slow") {
      for (int i = 0; i < 600; ++i) {
        ctx.touch();  // alive, busy: not a hang
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    if (f[3] == "stall") {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // body silent, I/O alive
    }
  }
}

// Meets the other learners of `r`'s generation through the coordinator's
// rendezvous store, as c10d's rendezvous does: every rank sets its key, then
// waits for every rank's. A newer generation arriving meanwhile is met instead.
// nullopt when it failed otherwise (said on stderr) or the actor stops.
std::optional<runtime::RendezvousInfo> meet(ActorContext& ctx, runtime::RendezvousInfo r) {
  const int64_t timeout_ms = ctx.config().cluster.collective_timeout_s * 1000;
  for (;;) {
    if (r.world_size <= 1) return r;
    control::StoreQuery set;
    set.op = wire::StoreOp::SET;
    set.keys = {fmt::format("test/rank/{}", r.rank)};
    set.value = std::to_string(getpid());
    set.timeout_ms = timeout_ms;
    control::StoreAnswer a = ctx.rendezvous_store(r.generation, set);
    if (a.ok) {
      control::StoreQuery wait;
      wait.op = wire::StoreOp::WAIT;
      for (int rank = 0; rank < r.world_size; ++rank)
        wait.keys.push_back(fmt::format("test/rank/{}", rank));
      wait.timeout_ms = timeout_ms;
      a = ctx.rendezvous_store(r.generation, wait);
    }
    if (a.ok) {
      fmt::print(stderr, "met generation {} ({} learners)\n", r.generation, r.world_size);
      return r;
    }
    if (ctx.stopping()) return std::nullopt;
    if (auto now = ctx.rendezvous(); now && now->generation > r.generation) {
      r = *now;
      continue;
    }
    fmt::print(stderr, "rendezvous of generation {} failed: {}\n", r.generation, a.error);
    return std::nullopt;
  }
}

class Learner : public ActorBody {
 public:
  int run(ActorContext& ctx) override {
    auto r = ctx.wait_rendezvous(0, std::chrono::seconds(60));
    if (!r) return ctx.stopping() ? 0 : 5;
    r = meet(ctx, *r);
    if (!r) return ctx.stopping() ? 0 : 11;
    uint64_t generation = r->generation;
    step_ = 0;
    if (r->resume_from_step >= 0) {  // the checkpoint streamed back must be the one committed
      control::CheckpointQuery query;
      query.step = r->resume_from_step;
      auto loaded = ctx.load_checkpoint(query, std::chrono::seconds(30));
      if (!loaded) return ctx.stopping() ? 0 : 6;
      const runtime::CheckpointBlobs* blobs = &loaded->blobs;
      if (blobs->at("state") != fmt::format("step {}", r->resume_from_step) ||
          blobs->at("weights") != test_weights(r->resume_from_step, checkpoint_bytes())) {
        fmt::print(stderr, "checkpoint {} holds '{}' and {} bytes of weights\n",
                   r->resume_from_step, blobs->at("state"), blobs->at("weights").size());
        return 8;
      }
      fmt::print(stderr, "resumed from checkpoint {} ({} bytes of weights)\n", r->resume_from_step,
                 blobs->at("weights").size());
      step_ = r->resume_from_step;
    }
    const JobConfig& c = ctx.config();
    const int64_t budget = c.ssl.epochs * c.ssl.steps_per_epoch;
    const auto t0 = std::chrono::steady_clock::now();
    int64_t done = 0;
    while (step_ < budget) {
      if (ctx.stopping()) return 0;
      if (auto now = ctx.rendezvous(); now && now->generation != generation) {
        const auto met = meet(ctx, *now);  // re-rendezvous: a peer restarted
        if (!met) return ctx.stopping() ? 0 : 11;
        generation = met->generation;
      }
      maybe_fault(ctx, step_);
      ctx.sleep_for(std::chrono::milliseconds(step_ms()));
      ++step_;
      ++done;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx.report(step_, done * 8 / std::max(seconds, 1e-3),
                 {{"loss", 1.0 / static_cast<double>(step_)}, {"lr", 0.001}});
      if (ctx.assignment().rank == 0 && step_ % c.ssl.checkpoint_every_steps == 0)
        commit(ctx, "checkpoint");
    }
    return 0;
  }

  void checkpoint(ActorContext& ctx) override {
    if (ctx.assignment().rank == 0) commit(ctx, "drain-checkpoint");
  }
  // step_ is only advanced once a step is done: a checkpoint taken during a
  // step is the last completed one, as SslTrainer::save() gives.
  bool checkpoint_while_running() const override { return true; }

 private:
  // A real checkpoint: its state, plus a blob of several chunks.
  void commit(ActorContext& ctx, const char* why) {
    std::lock_guard lock(commit_mutex_);  // the runtime takes one checkpoint at a time
    const int64_t step = step_;
    const runtime::CheckpointBlobs blobs{{"state", fmt::format("step {}", step)},
                                         {"weights", test_weights(step, checkpoint_bytes())}};
    const bool ok = ctx.save_checkpoint(step, blobs, std::chrono::seconds(30));
    fmt::print(stderr, "{} {} {}\n", why, step, ok ? "committed" : "NOT committed");
    if (ok && std::getenv(kRecommitVariable) != nullptr) {  // the same checkpoint once more
      const bool again = ctx.save_checkpoint(step, blobs, std::chrono::seconds(30));
      fmt::print(stderr, "re-{} {} {}\n", why, step, again ? "committed" : "NOT committed");
    }
  }
  std::mutex commit_mutex_;
  std::atomic<int64_t> step_{0};
};

// The learner slot of a probe or eval stage: takes pretraining's newest
// checkpoint from the coordinator, checks it is the one committed, and
// commits the stage's output (kTestInputFile) at that step.
class Probe : public ActorBody {
 public:
  int run(ActorContext& ctx) override {
    auto r = ctx.wait_rendezvous(0, std::chrono::seconds(60));
    if (!r) return ctx.stopping() ? 0 : 5;
    maybe_fault(ctx, 0);
    const std::string& stage = ctx.assignment().stage;
    if (r->resume_from_step >= 0) {
      fmt::print(stderr, "{} committed already at {}\n", stage, r->resume_from_step);
      return 0;
    }
    control::CheckpointQuery query;
    query.source = wire::CheckpointSource::INPUT_CHECKPOINT;
    query.blobs = {"weights"};
    const auto input = ctx.load_checkpoint(query, std::chrono::seconds(30));
    if (!input) return ctx.stopping() ? 0 : 6;
    if (input->blobs.at("weights") != test_weights(input->step, checkpoint_bytes())) return 8;
    const bool ok =
        ctx.save_checkpoint(input->step, {{kTestInputFile, test_weights(1, kTestInputFileBytes)}},
                            std::chrono::seconds(30));
    fmt::print(stderr, "{} of checkpoint {} {}\n", stage, input->step,
               ok ? "committed" : "NOT committed");
    return ok ? 0 : 10;
  }
};

// A learner slot runs its stage's body.
class StageLearner : public ActorBody {
 public:
  int run(ActorContext& ctx) override {
    if (ctx.assignment().stage == "probe" || ctx.assignment().stage == "eval")
      body_ = std::make_unique<Probe>();
    else
      body_ = std::make_unique<Learner>();
    return body_->run(ctx);
  }
  void checkpoint(ActorContext& ctx) override {
    if (body_) body_->checkpoint(ctx);
  }
  bool checkpoint_while_running() const override { return true; }

 private:
  std::unique_ptr<ActorBody> body_;
};

class Data : public ActorBody {
 public:
  int run(ActorContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; !ctx.stopping();) {
      maybe_fault(ctx, step);
      ctx.sleep_for(std::chrono::milliseconds(step_ms()));
      ++step;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx.report(step, step * 8 / std::max(seconds, 1e-3));
    }
    return 0;
  }
};

// A rollout actor that first checks the stage's inputs it gets over the wire
// (kInputStepVariable), then serves like a data actor.
class InputChecker : public Data {
 public:
  int run(ActorContext& ctx) override {
    const char* step = std::getenv(kInputStepVariable);
    if (step && !inputs_ok(ctx, std::stoll(step))) return ctx.stopping() ? 0 : 9;
    return Data::run(ctx);
  }

 private:
  static bool inputs_ok(ActorContext& ctx, int64_t step) {
    const auto timeout = std::chrono::seconds(30);
    control::CheckpointQuery file;
    file.source = wire::CheckpointSource::INPUT_FILE;
    file.blobs = {kTestInputFile};
    const auto loaded_files = ctx.load_checkpoint(file, timeout);
    const runtime::CheckpointBlobs* files = loaded_files ? &loaded_files->blobs : nullptr;
    if (!files || files->size() != 1 ||
        files->at(kTestInputFile) != test_weights(1, kTestInputFileBytes)) {
      fmt::print(stderr, "input file wrong or missing\n");
      return false;
    }
    // The teacher of a checkpoint of `saccade pretrain`, or the test learner's weights.
    const char* blob_variable = std::getenv(kInputBlobVariable);
    const std::string blob = blob_variable ? blob_variable : "teacher";
    const size_t bytes = blob == "teacher" ? kTestTeacherBytes : checkpoint_bytes();
    control::CheckpointQuery teacher;
    teacher.source = wire::CheckpointSource::INPUT_CHECKPOINT;
    teacher.step = step;
    teacher.blobs = {blob};
    const auto loaded = ctx.load_checkpoint(teacher, timeout);
    const runtime::CheckpointBlobs* blobs = loaded ? &loaded->blobs : nullptr;
    if (!blobs || loaded->step != step || blobs->size() != 1 ||
        blobs->at(blob) != test_weights(step, bytes)) {
      fmt::print(stderr, "input checkpoint {} wrong or missing ({} blobs)\n", step,
                 blobs ? blobs->size() : 0);
      return false;
    }
    control::CheckpointQuery outside = file;
    outside.blobs = {"../job.toml"};
    control::CheckpointQuery missing = teacher;
    missing.step = step + 1;
    if (ctx.load_checkpoint(outside, timeout) || ctx.load_checkpoint(missing, timeout)) {
      fmt::print(stderr, "a file outside the input folder or a missing step was sent\n");
      return false;
    }
    fmt::print(stderr, "inputs verified: {} bytes of head, {} bytes of teacher {}\n",
               files->at(kTestInputFile).size(), blobs->at(blob).size(), step);
    return true;
  }
};

}  // namespace
}  // namespace saccade::testing

int main(int argc, char** argv) {
  using namespace saccade;
  runtime::ActorBodies bodies = {
      {wire::Role::LEARNER, [] { return std::make_unique<testing::StageLearner>(); }},
      {wire::Role::DATA, [] { return std::make_unique<testing::Data>(); }},
      {wire::Role::EVAL, [] { return std::make_unique<testing::Data>(); }},
      {wire::Role::ROLLOUT, [] { return std::make_unique<testing::InputChecker>(); }},
  };
  CLI::App app{"saccade test actor"};
  app.require_subcommand(1);
  int code = 0;
  runtime::add_actor_command(app, std::move(bodies), [&](int c) { code = c; });
  CLI11_PARSE(app, argc, argv);
  return code;
}
