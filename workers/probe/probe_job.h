// `saccade probe CONFIG`: the probe stage in one process. Loads the teacher
// backbone of a committed pretraining checkpoint, extracts the features of the
// training and validation splits, sweeps the linear head's learning rates and
// keeps the best on validation. Torch-free header.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"

namespace saccade::workers {

struct ProbeRunOptions {
  int64_t step = -1;             // the checkpoint to probe; -1 = the newest
  int64_t max_train_images = 0;  // 0 = the whole training split
  int64_t max_val_images = 0;    // 0 = the whole validation split
};

struct ProbeReport {
  int64_t checkpoint_step = -1;
  std::string checkpoint_db;
  int64_t train_images = 0;
  int64_t val_images = 0;
  int64_t skipped_corrupt = 0;
  double feature_seconds = 0;                    // extracting both splits' features
  double lr = 0;                                 // kept
  std::vector<std::pair<double, double>> sweep;  // (lr, validation top-1 after the last glimpse)
  double vit_accuracy = 0;
  std::vector<double> step_accuracy;  // validation top-1 after glimpse k
  std::string head_path;              // job.work_dir/probe_head.safetensors
  std::string report_path;            // job.work_dir/probe.json
};

// Throws std::runtime_error when there is no checkpoint or no labels.
ProbeReport run_probe(const JobConfig& config, const ProbeRunOptions& options = {});

}  // namespace saccade::workers
