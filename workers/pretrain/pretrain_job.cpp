#include "workers/pretrain/pretrain_job.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/metrics_log.h"
#include "common/openblas_core.h"
#include "common/seconds_since.h"
#include "dataloader/ssl_loader.h"
#include "model/weights.h"
#include "storage/checkpoint_store.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/job_options/pretrain_options.h"
#include "workers/pretrain/knn_monitor.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/pretrain/training_loop.h"

namespace saccade::pretrain {
namespace {

using Clock = std::chrono::steady_clock;

// Debian's LibTorch runs on whatever libblas.so.3 is installed: the reference
// BLAS is ~30x slower than OpenBLAS (docs/references.md). Say so loudly.
void check_blas_speed() {
  const torch::Tensor a = torch::randn({256, 256});
  (void)a.matmul(a);
  const auto start = Clock::now();
  const int reps = 20;
  for (int i = 0; i < reps; ++i) (void)a.matmul(a);
  const double gflops = reps * 2.0 * 256 * 256 * 256 / seconds_since(start) / 1e9;
  if (gflops < 10) {
    spdlog::warn(
        "BLAS runs at {:.1f} GFLOP/s: install OpenBLAS (apt-get install libopenblas0-pthread)",
        gflops);
  } else {
    const std::string core = openblas_core();
    spdlog::info("BLAS: {:.0f} GFLOP/s on {} thread(s){}", gflops, at::get_num_threads(),
                 core.empty() ? "" : " (OpenBLAS core " + core + ")");
  }
}

std::string position_text(const data::DataPosition& p) {
  return fmt::format("{} {}", p.epoch, p.offset);
}

data::DataPosition parse_position(const std::string& s) {
  data::DataPosition p;
  if (std::sscanf(s.c_str(), "%ld %ld", &p.epoch, &p.offset) != 2) {
    throw std::runtime_error(fmt::format("checkpoint: bad data position '{}'", s));
  }
  return p;
}

}  // namespace

PretrainResult run_pretrain(const JobConfig& config, const PretrainRunOptions& run) {
  at::set_num_threads(job_options::resolve_threads(config.ssl.threads));
  check_blas_speed();

  // One process uses the first GPU when LibTorch sees one (a CUDA build on a GPU node).
  const std::string device = torch::cuda::is_available() ? "cuda:0" : "cpu";
  if (config.ssl.precision != "fp32" && device == "cpu")
    spdlog::warn(
        "ssl.precision = \"{}\" on the CPU: matmuls in bf16 are usually slower than fp32 on "
        "CPUs without bf16 instructions",
        config.ssl.precision);
  const auto dataset = data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
  const int64_t per_epoch = job_options::steps_per_epoch(config, dataset->size());
  const int64_t total_steps = run.max_steps >= 0
                                  ? std::min(run.max_steps, config.ssl.epochs * per_epoch)
                                  : config.ssl.epochs * per_epoch;
  const int64_t batch = job_options::per_rank_batch(config, 1);
  spdlog::info("pretrain: {} images, {} steps ({} per epoch) of {} images", dataset->size(),
               total_steps, per_epoch, batch);

  const std::filesystem::path work_dir = config.job.work_dir;
  std::filesystem::create_directories(work_dir);
  PretrainResult result;
  result.checkpoint_db = (work_dir / "checkpoints.db").string();
  auto store = storage::CheckpointStore::open(result.checkpoint_db);

  SslTrainer trainer(job_options::trainer_options(config, per_epoch, device));
  spdlog::info("pretrain: on {} in {}", device, config.ssl.precision);
  data::DataPosition position;
  if (run.resume) {
    if (auto latest = store->latest()) {
      trainer.load(store->read_all(latest->step));
      position = parse_position(latest->meta.at("data_position"));
      spdlog::info("pretrain: resumed from checkpoint {} (epoch {}, offset {})", latest->step,
                   position.epoch, position.offset);
    }
  }
  result.first_step = trainer.step();

  data::SslLoader loader(dataset, job_options::shard_options(config, dataset->size(), 1, 0),
                         position, job_options::view_options(config),
                         job_options::loader_options(config, batch));

  MetricsLog metrics((work_dir / config.logging.metrics_file).string());
  ProgressLine progress(total_steps, config.logging.progress);
  const std::unique_ptr<KnnMonitor> knn =
      KnnMonitor::open(job_options::knn_monitor_options(config));
  if (knn)
    spdlog::info("pretrain: k-NN check every {} steps ({} bank, {} query images)",
                 config.ssl.knn_every_steps, knn->bank_images(), knn->query_images());
  auto checkpoint = [&](const data::DataPosition& at) {
    store->commit(trainer.step(), trainer.save(),
                  {{"data_position", position_text(at)}, {"job", config.job.name}});
    store->prune(3);
    spdlog::info("pretrain: checkpoint {} committed to {}", trainer.step(), result.checkpoint_db);
  };
  TrainingLoopHooks hooks;
  hooks.keep_going = [&] { return !(run.stop && run.stop->load()); };
  hooks.next_batch = [&] { return std::optional<data::LoadedBatch>(loader.next()); };
  hooks.report = [&](int64_t step, const StepStats* s, const StepMetrics& values,
                     const std::string& check) {
    if (!check.empty()) progress.set_note(check);
    if (!s) {
      metrics.append("pretrain", step, values);
      return;
    }
    double images_per_second = 0, tflops = NAN, mfu = NAN;
    for (const auto& [name, v] : values) {
      if (name == "images_per_second") images_per_second = v;
      if (name == "tflops") tflops = v;
      if (name == "mfu") mfu = v;
    }
    progress.update(step, s->loss, s->lr, images_per_second, tflops, mfu);
    StepMetrics line = values;
    line.emplace_back("skipped_corrupt", static_cast<double>(dataset->stats().skipped_corrupt()));
    metrics.append("pretrain", s->step, line);
    if (run.on_step) run.on_step();
  };
  hooks.checkpoint = checkpoint;
  hooks.busy = run.on_step;  // before each k-NN check, which takes seconds
  const TrainingLoopResult loop = run_training_loop(
      trainer, {total_steps, config.ssl.checkpoint_every_steps, batch}, knn.get(), hooks, position);
  if (!loop.reached_budget) {  // stopped (SIGINT/SIGTERM): commit where it stands
    checkpoint(loop.position);
    result.stopped = true;
  }
  progress.finish();

  result.final_loss = loop.final_loss;
  result.steps = trainer.step();
  result.images_per_second = loop.images / std::max(1e-9, loop.wall_seconds);
  result.data_share = loop.prep_seconds / std::max(1e-9, loop.prep_seconds + loop.step_seconds);
  result.stall_share = loop.stall_seconds / std::max(1e-9, loop.wall_seconds);
  if (!result.stopped) {
    result.backbone_path = (work_dir / "backbone.safetensors").string();
    std::ofstream(result.backbone_path, std::ios::binary) << trainer.export_backbone();
  }
  const int64_t steps_run = std::max<int64_t>(1, result.steps - result.first_step);
  const StepPhases& p = loop.phases;
  result.step_phases = {p.teacher / steps_run,  p.student / steps_run, p.loss / steps_run,
                        p.backward / steps_run, p.update / steps_run,  p.other / steps_run};
  spdlog::info(
      "pretrain: {} steps, {:.1f} images/s, data preparation {:.0f}% of compute, trainer waited "
      "{:.0f}% "
      "of the time, {} corrupt image(s) skipped",
      result.steps - result.first_step, result.images_per_second, 100 * result.data_share,
      100 * result.stall_share, dataset->stats().skipped_corrupt());
  const double total = std::max(1e-9, loop.step_seconds);
  spdlog::info(
      "pretrain: step time {:.0f} ms: teacher forward {:.0f}%, student forward {:.0f}%, loss "
      "{:.0f}%, backward {:.0f}%, update {:.0f}%, other {:.0f}%",
      1000 * loop.step_seconds / steps_run, 100 * p.teacher / total, 100 * p.student / total,
      100 * p.loss / total, 100 * p.backward / total, 100 * p.update / total,
      100 * p.other / total);

  return result;
}

}  // namespace saccade::pretrain
