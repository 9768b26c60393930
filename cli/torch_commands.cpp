// The commands that need LibTorch, compiled into libsaccade_torch.so.
#include "cli/torch_commands.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include "common/config.h"
#include "common/logging.h"
#include "schemas/wire.h"
#include "storage/checkpoint_store.h"
#include "workers/eval/eval_actor.h"
#include "workers/eval/eval_job.h"
#include "workers/learner/learner_actor.h"
#include "workers/policy/policy_actors.h"
#include "workers/policy/policy_job.h"
#include "workers/pretrain/pretrain_job.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/probe/probe_actor.h"
#include "workers/probe/probe_job.h"
#include "workers/probe/task_head.h"
#include "workers/teacher/teacher_backbone.h"

namespace {

// The probe's supervised baseline trains through `saccade pretrain`'s run.
saccade::probe::PretrainedBackbone pretrain_backbone(const saccade::JobConfig& config,
                                                     int64_t max_steps,
                                                     const std::function<void()>& on_step) {
  saccade::pretrain::PretrainRunOptions run;
  run.max_steps = max_steps;
  run.on_step = on_step;
  const saccade::pretrain::PretrainResult r = saccade::pretrain::run_pretrain(config, run);
  return {r.first_step, r.steps, r.images_per_second, r.backbone_path};
}

std::atomic<bool> g_stop{false};
void request_stop(int) {
  g_stop.store(true);
}

// Loads the config (exit 2 when it is refused, before anything starts), then
// runs `body`; an exception is reported as "saccade COMMAND: ..." with exit 1.
int with_config(const char* config_path, const char* command,
                const std::function<int(const saccade::JobConfig&)>& body) {
  saccade::JobConfig config;
  try {
    config = saccade::load_config(config_path);
  } catch (const saccade::ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  try {
    return body(config);
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade {}: {}\n", command, e.what());
    return 1;
  }
}

}  // namespace

extern "C" int saccade_torch_pretrain(const saccade::cli::PretrainArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "pretrain", [&](const JobConfig& config) {
    init_logging({"pretrain", 0, *args->log_level ? args->log_level : config.logging.level,
                  *args->log_dir ? args->log_dir : config.logging.dir});
    // SIGINT/SIGTERM (preemption): finish the step, checkpoint, exit cleanly.
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    pretrain::PretrainRunOptions run;
    run.max_steps = args->steps;
    run.resume = !args->fresh;
    run.stop = &g_stop;
    const pretrain::PretrainResult r = pretrain::run_pretrain(config, run);
    fmt::print(
        "pretrain: steps {} -> {}, final loss {:.4f}, {:.1f} images/s, data preparation {:.0f}% of "
        "compute\n",
        r.first_step, r.steps, r.final_loss, r.images_per_second, 100 * r.data_share);
    fmt::print("checkpoints: {}\n", r.checkpoint_db);
    if (!r.backbone_path.empty()) fmt::print("backbone: {}\n", r.backbone_path);
    return 0;
  });
}

extern "C" int saccade_torch_bench_model(const saccade::model::ModelBenchOptions* options) {
  try {
    return saccade::model::run_model_bench(*options, std::cout);
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade bench model: {}\n", e.what());
    return 2;
  }
}

extern "C" int saccade_torch_bench_allreduce(const saccade::bench::AllreduceBenchOptions* options) {
  try {
    return saccade::bench::run_allreduce_bench(*options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade bench allreduce{}: {}\n",
               options->rank >= 0 ? fmt::format(" (rank {})", options->rank) : "", e.what());
    return 1;
  }
}

extern "C" int saccade_torch_bench_step(const saccade::bench::StepBenchOptions* options) {
  try {
    return saccade::bench::run_step_bench(*options, std::cout);
  } catch (const saccade::ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade bench step: {}\n", e.what());
    return 1;
  }
}

extern "C" int saccade_torch_bench_rollouts(const saccade::bench::RolloutBenchOptions* options) {
  saccade::init_logging({"bench", 0, "warn", ""});  // the actors' per-request lines are noise here
  return saccade::bench::run_rollout_bench(*options);
}

extern "C" int saccade_torch_export(const saccade::cli::ExportArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "export", [&](const JobConfig& config) {
    const teacher::TeacherBackbone teacher = teacher::load_teacher_backbone(config, args->step);
    const std::filesystem::path dir = config.job.work_dir;
    const std::string out = *args->out ? args->out : (dir / "backbone.safetensors").string();
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    file << teacher.safetensors;
    if (!file.flush()) {
      fmt::print(stderr, "saccade export: cannot write {}\n", out);
      return 1;
    }
    fmt::print("backbone of checkpoint {} ({}): {}\n", teacher.step, teacher.db, out);
    return 0;
  });
}

extern "C" int saccade_torch_probe(const saccade::cli::ProbeArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "probe", [&](const JobConfig& config) {
    init_logging({"probe", 0, *args->log_level ? args->log_level : config.logging.level, ""});
    probe::ProbeRunOptions run;
    run.step = args->step;
    run.max_train_images = args->max_train_images;
    run.max_val_images = args->max_val_images;
    run.random_init = args->random_init;
    run.backbone_file = args->backbone_path;
    run.pretrain = pretrain_backbone;
    const probe::ProbeReport r = probe::run_probe(config, run);
    if (!r.backbone_file.empty())
      fmt::print("probe of the backbone in {}", r.backbone_file);
    else if (r.checkpoint_step >= 0)
      fmt::print("probe of checkpoint {} ({})", r.checkpoint_step, r.checkpoint_db);
    else
      fmt::print("probe of the initial weights (job.seed {})", config.job.seed);
    fmt::print(
        ": {} training, {} validation images (rows NAME: linear on the first state token, "
        "NAME/all_states: linear on every state token, NAME/state_and_patch_mean: linear on the "
        "first state token and the mean patch token, NAME/transformer_head: the transformer "
        "head)\n{}",
        r.train_images, r.val_images, probe::format_probe_table(r));
    if (!r.head_path.empty())
      fmt::print("task head written for the policy and eval stages: {} (probe.head)\n",
                 config.probe.head);
    fmt::print("features {:.1f} s, probes {:.1f} s\n", r.feature_seconds, r.fit_seconds);
    if (!r.head_path.empty()) fmt::print("head: {}\n", r.head_path);
    fmt::print("report: {}\n", r.report_path);
    return 0;
  });
}

extern "C" int saccade_torch_policy(const saccade::cli::PolicyArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "policy", [&](const JobConfig& config) {
    init_logging({"policy", 0, *args->log_level ? args->log_level : config.logging.level, ""});
    policy::PolicyRunOptions run;
    run.max_train_images = args->max_train_images;
    run.max_val_images = args->max_val_images;
    const policy::PolicyReport r = policy::run_policy(config, run);
    fmt::print(
        "gaze policy for {}: GRPO on {} training images, {} epochs, rewarded by the {} task "
        "head\n",
        probe::backbone_origin(r.checkpoint_step, r.backbone_file), r.train_images, r.epochs.size(),
        r.task_head);
    for (size_t e = 0; e < r.epochs.size(); ++e)
      fmt::print("  epoch {}: mean reward {:.4f}, sampled top-1 after the last glimpse {:.2f}%\n",
                 e + 1, r.epochs[e].mean_reward, 100 * r.epochs[e].final_accuracy);
    fmt::print("validation top-1 after 1..{} glimpses ({} images):\n  random:",
               r.policy_accuracy.size(), r.val_images);
    for (double a : r.random_accuracy) fmt::print(" {:.2f}%", 100 * a);
    fmt::print("\n  fixed scan (centre, then a 3 x 3 grid):");
    for (double a : r.scan_accuracy) fmt::print(" {:.2f}%", 100 * a);
    if (!r.fixed_path_accuracy.empty()) {
      fmt::print("\n  learned fixed path (state-blind GRPO, same budget):");
      for (double a : r.fixed_path_accuracy) fmt::print(" {:.2f}%", 100 * a);
    }
    fmt::print("\n  policy:");
    for (double a : r.policy_accuracy) fmt::print(" {:.2f}%", 100 * a);
    fmt::print("\ngaze spread across images by glimpse (RMS, short sides):\n  random:");
    for (double d : r.random_spread) fmt::print(" {:.3f}", d);
    if (!r.fixed_path_spread.empty()) {
      fmt::print("\n  learned fixed path:");
      for (double d : r.fixed_path_spread) fmt::print(" {:.3f}", d);
    }
    fmt::print("\n  policy:");
    for (double d : r.policy_spread) fmt::print(" {:.3f}", d);
    fmt::print("\npolicy's mixture-weight entropy per image by glimpse (nats):\n  policy:");
    for (double h : r.policy_entropy) fmt::print(" {:.3f}", h);
    fmt::print("\npolicy: {}\nreport: {}\n", r.policy_path, r.report_path);
    return 0;
  });
}

extern "C" int saccade_torch_eval(const saccade::cli::EvalArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "eval", [&](const JobConfig& config) {
    init_logging({"eval", 0, *args->log_level ? args->log_level : config.logging.level, ""});
    eval::EvalRunOptions run;
    run.max_images = args->max_images;
    run.max_sweep_images = args->max_sweep_images;
    const eval::EvalReport r = eval::run_eval(config, run);
    fmt::print("evaluation of {}\n{}report: {}\n",
               probe::backbone_origin(r.checkpoint_step, r.backbone_file),
               eval::format_eval_table(r), r.report_path);
    return 0;
  });
}

namespace {

// A learner slot runs its stage's body: sequential-to-global DINO
// (pretrain), the probe, GRPO's policy learner, or the evaluation.
class StageLearner : public saccade::runtime::ActorBody {
 public:
  int run(saccade::runtime::ActorContext& ctx) override {
    const std::string& stage = ctx.assignment().stage;
    if (stage == "probe")
      body_ = saccade::probe::make_probe_actor(pretrain_backbone);
    else if (stage == "policy")
      body_ = saccade::policy::make_policy_learner();
    else if (stage == "eval")
      body_ = saccade::eval::make_eval_leader();
    else
      body_ = saccade::learner::make_learner_actor();
    return body_->run(ctx);
  }
  void checkpoint(saccade::runtime::ActorContext& ctx) override {
    if (body_) body_->checkpoint(ctx);
  }

 private:
  std::unique_ptr<saccade::runtime::ActorBody> body_;
};

}  // namespace

extern "C" saccade::runtime::ActorBody* saccade_torch_make_body(int role) {
  if (role == static_cast<int>(saccade::wire::Role::LEARNER)) return new StageLearner();
  if (role == static_cast<int>(saccade::wire::Role::ROLLOUT))
    return saccade::policy::make_rollout_actor().release();
  if (role == static_cast<int>(saccade::wire::Role::EVAL))
    return saccade::policy::make_eval_actor().release();
  return nullptr;
}
