// What a measurement of gaze sources (policy_trainer.h, evaluate_gazes) is run
// with: a plain struct, filled from the job config by
// workers/job_options/model_options.h.
#pragma once

#include <cstdint>
#include <functional>

namespace saccade::policy {

struct GazeEvalOptions {
  int64_t steps = 8;
  int64_t max_images = 0;  // the first max_images; 0 = all
  int64_t batch_size = 256;
  int threads = 1;
  uint64_t seed = 0;
  bool state_blind = false;     // the policy is state-blind (TraceOptions::state_blind)
  uint64_t policy_version = 0;  // RolloutBatch::policy_version: names the policy's weights
  double scale = 1;             // the images resized (RolloutBatch::scale)
  bool bilinear_upscale = false;
  std::function<void()> on_progress;  // after each batch (may be empty)
};

}  // namespace saccade::policy
