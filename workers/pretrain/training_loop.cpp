#include "workers/pretrain/training_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "common/seconds_since.h"
#include "workers/pretrain/knn_monitor.h"

namespace saccade::pretrain {

TrainingLoopResult run_training_loop(SslTrainer& trainer, const TrainingLoopOptions& options,
                                     const KnnMonitor* knn, const TrainingLoopHooks& hooks,
                                     data::DataPosition start) {
  using Clock = std::chrono::steady_clock;
  TrainingLoopResult result;
  result.position = start;
  if (knn && trainer.step() == 0) {  // the starting point of the curve: the initial weights
    if (hooks.busy) hooks.busy();
    const KnnCheck check = knn->measure(trainer);
    spdlog::info("step 0 {} (initial weights)", check.summary());
    hooks.report(0, nullptr, check.metrics(), check.summary());
  }
  const auto wall_start = Clock::now();
  // With trainer.prefetches(), the loop reads one batch ahead so that the trainer copies it
  // to the device during the step before; a batch read ahead and not stepped is forgotten
  // however the loop ends (its data position is not taken: a resume reads it again).
  std::optional<data::LoadedBatch> upcoming;
  struct ForgetNext {  // declared after `upcoming`: runs before that batch is freed
    SslTrainer& trainer;
    ~ForgetNext() { trainer.forget_next(); }
  } forget_next{trainer};
  bool stopped = false;  // next_batch ended the loop while reading ahead
  while (trainer.step() < options.total_steps && !stopped) {
    if (!hooks.keep_going()) break;
    const auto wait_start = Clock::now();
    std::optional<data::LoadedBatch> loaded = upcoming ? std::move(upcoming) : hooks.next_batch();
    upcoming.reset();
    if (loaded && trainer.prefetches() && trainer.step() + 1 < options.total_steps) {
      upcoming = hooks.next_batch();
      stopped = !upcoming;
    }
    const double data_wait = seconds_since(wait_start);  // the trainer idle, waiting for data
    result.stall_seconds += data_wait;
    if (!loaded) break;
    const StepStats s =
        trainer.train_step(*loaded->batch, upcoming ? upcoming->batch.get() : nullptr);
    result.position = loaded->position;
    result.prep_seconds += loaded->prep_seconds;
    result.step_seconds += s.seconds;
    result.phases += s.phases;
    result.images += options.batch_images;
    result.final_loss = s.loss;
    StepMetrics metrics = step_metrics(s);
    const double images_per_second = result.images / std::max(1e-9, seconds_since(wall_start));
    // Achieved model TFLOP/s at the loop's rate (data waits included, as TorchTitan's MFU).
    const double tflops = s.flop_per_image * images_per_second / 1e12;
    metrics.insert(metrics.end(), {{"data_wait_seconds", data_wait},
                                   {"prep_seconds", loaded->prep_seconds},
                                   {"batch_bytes", static_cast<double>(loaded->wire_bytes)},
                                   {"images_per_second", images_per_second},
                                   {"tflops", tflops}});
    if (s.peak_tflops > 0) metrics.emplace_back("mfu", tflops / s.peak_tflops);
    std::string summary;
    if (knn && knn->due(trainer.step())) {
      if (hooks.busy) hooks.busy();
      const auto knn_start = Clock::now();
      const KnnCheck check = knn->measure(trainer);
      const StepMetrics checked = check.metrics();
      metrics.insert(metrics.end(), checked.begin(), checked.end());
      summary = check.summary();
      spdlog::info("step {} {}, target entropy {:.3f} ln K, {} prototypes in use ({:.1f} s)",
                   trainer.step(), summary, s.target_entropy_ratio, s.prototypes_used,
                   seconds_since(knn_start));
    }
    hooks.report(trainer.step(), &s, metrics, summary);
    if (hooks.checkpoint &&
        (trainer.step() % options.checkpoint_every == 0 || trainer.step() == options.total_steps))
      hooks.checkpoint(result.position);
  }
  result.reached_budget = trainer.step() >= options.total_steps;
  result.wall_seconds = seconds_since(wall_start);
  return result;
}

}  // namespace saccade::pretrain
