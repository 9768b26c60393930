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
#include "workers/learner/learner_actor.h"
#include "workers/pretrain/pretrain_job.h"
#include "workers/pretrain/ssl_trainer.h"

namespace {

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
    workers::PretrainRunOptions run;
    run.max_steps = args->steps;
    run.resume = !args->fresh;
    run.stop = &g_stop;
    const workers::PretrainResult r = workers::run_pretrain(config, run);
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

extern "C" int saccade_torch_export(const saccade::cli::ExportArgs* args) {
  using namespace saccade;
  return with_config(args->config_path, "export", [&](const JobConfig& config) {
    // The job's checkpoints: the coordinator's database (a distributed job),
    // else the single-process trainer's.
    const std::filesystem::path dir = config.job.work_dir;
    std::filesystem::path db = dir / "coordinator.db";
    if (!std::filesystem::exists(db)) db = dir / "checkpoints.db";
    if (!std::filesystem::exists(db)) {
      fmt::print(stderr,
                 "saccade export: no checkpoints in {} (coordinator.db or checkpoints.db)\n",
                 dir.string());
      return 1;
    }
    auto store = storage::CheckpointStore::open(db.string());
    const auto info = args->step < 0 ? store->latest() : store->info(args->step);
    if (!info) {
      fmt::print(stderr, "saccade export: {} has no committed checkpoint{}\n", db.string(),
                 args->step < 0 ? "" : fmt::format(" {}", args->step));
      return 1;
    }
    workers::SslTrainer trainer(workers::trainer_options(config, /*steps_per_epoch=*/1));
    trainer.load(store->read_all(info->step));
    const std::string out = *args->out ? args->out : (dir / "backbone.safetensors").string();
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    file << trainer.export_backbone();
    if (!file.flush()) {
      fmt::print(stderr, "saccade export: cannot write {}\n", out);
      return 1;
    }
    fmt::print("backbone of checkpoint {} ({}): {}\n", info->step, db.string(), out);
    return 0;
  });
}

extern "C" saccade::runtime::ActorBody* saccade_torch_make_body(int role) {
  if (role == static_cast<int>(saccade::wire::Role::LEARNER))
    return saccade::workers::make_learner_actor().release();
  return nullptr;
}
