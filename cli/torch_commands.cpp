// The commands that need LibTorch, compiled into libsaccade_torch.so.
#include "cli/torch_commands.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "common/config.h"
#include "common/logging.h"
#include "workers/pretrain/pretrain_job.h"

namespace {

std::atomic<bool> g_stop{false};
void request_stop(int) {
  g_stop.store(true);
}

}  // namespace

extern "C" int saccade_torch_pretrain(const saccade::cli::PretrainArgs* args) {
  using namespace saccade;
  JobConfig config;
  try {
    config = load_config(args->config_path);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  try {
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
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade pretrain: {}\n", e.what());
    return 1;
  }
}

extern "C" int saccade_torch_bench_model(const saccade::model::ModelBenchOptions* options) {
  try {
    return saccade::model::run_model_bench(*options, std::cout);
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade bench model: {}\n", e.what());
    return 2;
  }
}
