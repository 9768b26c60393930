// The one pretraining loop, shared by `saccade pretrain` (one process, local
// loader, checkpoints.db) and the learner actor (remote batches, checkpoints to
// the coordinator): the k-NN check of the initial weights, then per step the
// training step, the k-NN check when due, the step's metrics, and a checkpoint
// every ssl.checkpoint_every_steps and at the budget. Where batches come from,
// where metrics and checkpoints go, and when to stop are the caller's hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataloader/ssl_loader.h"
#include "workers/pretrain/ssl_trainer.h"

namespace saccade::pretrain {

class KnnMonitor;

using StepMetrics = std::vector<std::pair<std::string, double>>;

struct TrainingLoopHooks {
  // Before each step: false ends the loop (a drain, a stop, a new generation).
  std::function<bool()> keep_going;
  // The next batch; nullopt ends the loop (stopping while waiting).
  std::function<std::optional<data::LoadedBatch>()> next_batch;
  // After each step (stats set) and after the initial k-NN check (stats null):
  // the metrics of that step, and the check's one-line summary ("" if none ran).
  std::function<void(int64_t step, const StepStats* stats, const StepMetrics& metrics,
                     const std::string& check_summary)>
      report;
  // Optional: called before long work of the loop's own (a k-NN check).
  std::function<void()> busy;
  // A checkpoint is due: commit the trainer's state with the data position
  // after the last step. Not set: no checkpoints (e.g. learners other than 0).
  std::function<void(const data::DataPosition& position)> checkpoint;
};

struct TrainingLoopOptions {
  int64_t total_steps = 0;       // the budget (optimiser steps)
  int64_t checkpoint_every = 0;  // ssl.checkpoint_every_steps
  int64_t batch_images = 0;      // images per step on this learner, for images/s
};

struct TrainingLoopResult {
  bool reached_budget = false;
  int64_t images = 0;
  double wall_seconds = 0;
  double prep_seconds = 0;   // data preparation reported by the batches
  double step_seconds = 0;   // inside train_step
  StepPhases phases;         // step_seconds by phase
  double stall_seconds = 0;  // waiting for the next batch
  double final_loss = 0;
  data::DataPosition position;  // after the last step taken
};

// Runs until the budget, or until a hook ends it. `knn` may be null. Exceptions
// of a step (e.g. a lost peer's all-reduce) propagate to the caller.
TrainingLoopResult run_training_loop(SslTrainer& trainer, const TrainingLoopOptions& options,
                                     const KnnMonitor* knn, const TrainingLoopHooks& hooks,
                                     data::DataPosition start = {});

}  // namespace saccade::pretrain
