// `saccade pretrain`: sequential-to-global DINO in one process. Loads the
// dataset, prefetches views, trains, checkpoints to RocksDB (resuming from the
// last committed checkpoint), logs metrics as JSON lines and exports the
// teacher's backbone when done.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/config.h"
#include "workers/pretrain/ssl_trainer.h"

namespace saccade::pretrain {

struct PretrainRunOptions {
  int64_t max_steps = -1;                   // stop after this step count (-1: the config's epochs)
  bool resume = true;                       // continue from the newest committed checkpoint
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: checkpoint and return
  // After every step (may be empty): a caller inside an actor reports progress
  // with it, so the runtime does not take a long run for a hung one.
  std::function<void()> on_step;
};

struct PretrainResult {
  int64_t first_step = 0;  // where this run started (> 0 after a resume)
  int64_t steps = 0;       // total optimiser steps done, over all runs
  double final_loss = 0;
  double images_per_second = 0;
  double data_share = 0;      // loader thread time / (loader thread time + step time)
  double stall_share = 0;     // time the trainer waited for data / wall time
  StepPhases step_phases;     // mean seconds per step by phase
  bool stopped = false;       // ended by `stop`, after a checkpoint
  std::string checkpoint_db;  // where checkpoints went
  std::string backbone_path;  // exported safetensors ("" when stopped early)
};

PretrainResult run_pretrain(const JobConfig& config, const PretrainRunOptions& run = {});

}  // namespace saccade::pretrain
