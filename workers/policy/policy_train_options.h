// What GRPO training of the gaze policy (policy_trainer.h) is run with: a
// plain struct, filled from the job config by workers/job_options/model_options.h.
#pragma once

#include <cstdint>

#include "rl/grpo.h"

namespace saccade::policy {

struct PolicyTrainOptions {
  int64_t epochs = 20;
  int64_t batch_size = 64;  // images per rollout batch
  int64_t group = 8;        // G traces per image
  int64_t steps = 8;        // T glimpses per trace
  int64_t updates = 4;      // gradient steps per rollout batch (GRPO's mu)
  double gamma = 0.9;
  rl::RewardKind reward = rl::RewardKind::kProbability;  // from the head's p(true class)
  double clip_eps = 0.2;
  double kl_beta = 0.0;  // > 0: penalty toward the policy as it was before training
  double lr = 1e-4;      // AdamW
  double std_start = 0.15, std_end = 0.05;  // cosine over all rollout batches
  int64_t max_images = 0;                   // the first max_images of the dataset; 0 = all
  int threads = 1;
  uint64_t seed = 0;
  bool state_blind = false;  // TraceOptions::state_blind: learn one fixed path
  // Rollout batch u draws with weights named version_base + u: a second policy
  // trained through the same rollout actors (the fixed-path baseline) names its
  // weights apart from the first's, which the actors may still hold.
  uint64_t version_base = 0;
};

}  // namespace saccade::policy
