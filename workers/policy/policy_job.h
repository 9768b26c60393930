// `saccade policy CONFIG`: the policy stage in one process. Loads the frozen
// teacher backbone and the probe's task head (work_dir/probe_head.safetensors,
// which names the checkpoint it was trained on), trains the gaze policy with
// GRPO (config [policy]) and measures it against random gazes on the
// validation split. Torch-free header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"

namespace saccade::policy {

// The trained policy (model::save_modules of the GazePolicy, bare names): the
// file `saccade policy` writes in job.work_dir and the blob of the policy
// stage's checkpoints, which the eval stage reads.
inline constexpr const char* kPolicyFile = "policy.safetensors";
// The learned fixed path's weights (policy.fixed_path_baseline), beside the
// policy's: a file of `saccade policy` and a blob of the policy stage's last
// checkpoint, which the eval stage's fixed_path mode reads.
inline constexpr const char* kFixedPathFile = "policy_fixed_path.safetensors";

// What the policy and eval stages start from: the probe's head file (its
// bytes, and where they came from for errors) and the teacher backbone
// (model::export_backbone's) of the pretraining checkpoint the head names.
struct ProbeHeadInputs {
  std::string head_bytes;
  std::string head_origin;
  std::string backbone_safetensors;
};

struct PolicyRunOptions {
  int64_t max_train_images = 0;  // overrides policy.train_images when > 0
  int64_t max_val_images = 0;    // overrides policy.val_images when > 0
  // The learned fixed path's weights from a checkpoint (a resumed job's policy
  // learner): loaded instead of trained again. Empty: trained.
  std::string fixed_path_weights;
  // Called with the fixed path's weights once trained (the job checkpoints them).
  std::function<void(const std::string&)> on_fixed_path;
};

struct PolicyEpochReport {
  double mean_reward = 0, final_accuracy = 0, loss = 0, clip_fraction = 0, kl = 0, std = 0,
         seconds = 0;
  double rollout_seconds = 0, update_seconds = 0;  // PolicyEpoch's
};

// A point of the training curve: the policy's mode on policy.curve_images
// validation images after `batches` rollout batches.
struct PolicyCurvePoint {
  int64_t batches = 0;
  double reward = 0;                // mean training reward of the batches since the point before
  std::vector<double> accuracy;     // top-1 after each glimpse
  std::vector<double> gaze_spread;  // GazeEvaluation's
};

struct PolicyReport {
  int64_t checkpoint_step = -1;  // the probe head's
  std::string backbone_file;     // the probe head's backbone file ("": a checkpoint's teacher)
  std::string task_head;         // its kind, the reward's: linear | transformer
  int64_t train_images = 0;
  int64_t val_images = 0;
  bool sees_state = true;  // false: a state-blind policy (policy.sees_state), a fixed path
  std::string reward;      // what GRPO rewarded (policy.reward)
  std::vector<PolicyEpochReport> epochs;
  std::vector<PolicyCurvePoint> val_curve;  // since this process started (a resumed run: after)
  std::vector<double> random_accuracy;      // validation top-1 after glimpse t, uniform gazes
  std::vector<double> policy_accuracy;      // ... gazes at the policy's heaviest component
  std::vector<double> random_spread;        // RMS spread of the images' gazes per step
  std::vector<double> scan_accuracy;        // the same for the fixed scan path (GazeSource::kScan)
  std::vector<double> policy_spread;        // (GazeEvaluation::gaze_spread)
  std::vector<double> policy_entropy;       // (GazeEvaluation::mixture_entropy), nats
  // policy.fixed_path_baseline: a state-blind policy trained after the policy with
  // the same budget, seeds and rollouts (empty when off or the policy is state-blind).
  std::vector<PolicyEpochReport> fixed_path_epochs;
  std::vector<double> fixed_path_accuracy;  // its mode's top-1 after each glimpse
  std::vector<double> fixed_path_spread;    // 0 up to rounding: one path for every image
  std::vector<double>
      fixed_path_entropy;       // its mixture's weight entropy (the same for every image)
  std::string fixed_path_file;  // job.work_dir/policy_fixed_path.safetensors, if trained
  std::string policy_path;      // job.work_dir/policy.safetensors
  std::string report_path;      // job.work_dir/policy.json
  bool stopped = false;         // a drain ended the training: nothing measured or written
};

// Throws std::runtime_error when the probe head or its checkpoint is missing.
PolicyReport run_policy(const JobConfig& config, const PolicyRunOptions& options = {});

}  // namespace saccade::policy
