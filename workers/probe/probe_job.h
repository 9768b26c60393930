// `saccade probe CONFIG`: the probe stage in one process. Loads the teacher
// backbone of a committed pretraining checkpoint, extracts the features of the
// first probe.train_images training and probe.val_images validation images,
// and scores them with k-NN and a linear probe (workers/probe/classifiers.h)
// beside the baselines of probe.baselines, measured in the same run. Writes
// the task head (probe.head: the linear probe on the glimpse states, or the
// transformer head on every state token) for the policy and eval stages.
// Torch-free header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"

namespace saccade::probe {

// The heads the probe writes in job.work_dir for the policy and eval stages
// (probe.head's kind; workers/probe/task_head.h): the task head on the
// glimpse states and ViT mode's head, metadata checkpoint_step.
inline constexpr const char* kProbeHeadFile = "probe_head.safetensors";

// What a pretraining run did: the supervised baseline's.
struct PretrainedBackbone {
  int64_t first_step = 0;        // where this run started (> 0 after a resume)
  int64_t steps = 0;             // optimiser steps done, over all runs
  double images_per_second = 0;  // of this run
  std::string backbone_path;     // the teacher's backbone, exported as safetensors
};
// Pretrains `config` in its job.work_dir (resuming what is there) for at most
// `max_steps` steps, calling `on_step` after each. The supervised baseline
// trains through it, handed in by the caller (workers/pretrain's run_pretrain),
// so that the probe holds no pretraining code.
using PretrainBackbone = std::function<PretrainedBackbone(
    const JobConfig& config, int64_t max_steps, const std::function<void()>& on_step)>;

struct ProbeRunOptions {
  int64_t step = -1;             // the checkpoint to probe; -1 = the newest
  bool random_init = false;      // probe the backbone's initial weights instead (no checkpoint)
  std::string backbone_file;     // or this backbone safetensors file (no checkpoint)
  int64_t max_train_images = 0;  // overrides probe.train_images when > 0
  int64_t max_val_images = 0;    // overrides probe.val_images when > 0
  // After each feature batch and each linear fit (may be empty): the probe
  // actor reports progress with it, so the runtime does not take a long probe
  // for a hung one.
  std::function<void()> on_progress;
  // Trains the supervised baseline (probe.baselines); needed only when it is asked for.
  PretrainBackbone pretrain;
};

// One row of the report: one backbone (or the raw pixels), validation top-1.
struct ProbeScores {
  std::string name;  // "pretrained", "random_init", "supervised" or "pixels"
  double vit_knn = 0, vit_linear = 0;
  std::vector<double> step_knn, step_linear;  // after glimpse k (empty for pixels)
  double vit_c = 0, task_c = 0;               // the linear probes' C, chosen on held-apart images
  // Rows "NAME/transformer_head" (probe.head = "transformer"): the transformer
  // heads' top-1 in the linear columns, no k-NN (NaN), and what was kept.
  bool transformer_head = false;
  double vit_lr = 0, task_lr = 0;
  int64_t vit_steps = 0, task_steps = 0;
};

struct ProbeReport {
  int64_t checkpoint_step = -1;  // -1: the random-init backbone was probed
  std::string checkpoint_db;
  std::string backbone_file;  // the file probed instead of a checkpoint ("" otherwise)
  int64_t train_images = 0;
  int64_t val_images = 0;
  int64_t skipped_corrupt = 0;
  double feature_seconds = 0;  // extracting every row's features
  double fit_seconds = 0;      // k-NN and linear probes
  // The supervised baseline (probe.baselines), trained in `supervised_dir`:
  // its steps, and the wall time and images/s of the training this run did
  // (0 when an earlier run had finished it).
  std::string supervised_dir;
  int64_t supervised_steps = 0;
  double supervised_seconds = 0;
  double supervised_images_per_second = 0;
  std::vector<ProbeScores> rows;  // rows[0]: the probed backbone; then the baselines
  std::string head_path;          // job.work_dir/probe_head.safetensors ("" with random_init)
  std::string head_safetensors;   // its bytes
  std::string report_path;        // job.work_dir/probe.json (probe_random_init.json)
  std::string json;               // its text
};

// The table `saccade probe` prints: k-NN and linear top-1 per row, ViT mode
// and after every glimpse.
std::string format_probe_table(const ProbeReport& report);

// `saccade probe`: the backbone from this node's databases (or the random
// init). Throws std::runtime_error when there is no checkpoint or no labels.
ProbeReport run_probe(const JobConfig& config, const ProbeRunOptions& options = {});
// The probe of `backbone_safetensors` (model::export_backbone's), the teacher
// of pretraining checkpoint `step` (-1 with options.random_init); writes the
// head and report in job.work_dir like run_probe. options.step is not used.
ProbeReport probe_backbone(const JobConfig& config, const std::string& backbone_safetensors,
                           int64_t step, const ProbeRunOptions& options);

}  // namespace saccade::probe
