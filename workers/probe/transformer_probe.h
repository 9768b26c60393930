// The paper's transformer task head (model::TaskHead, transformer kind: one
// block over [learned query, every state token]) fitted on frozen state
// tokens, standardised per token and channel: AdamW with a cosine schedule
// over a fixed number of steps, the learning rate and the stopping point
// chosen on training images held apart (the linear probe's split), the
// snapshot best on them kept (early stopping, no refit).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "workers/probe/task_head.h"

namespace saccade::probe {

struct TransformerProbeOptions {
  std::vector<double> lrs = {1e-3, 3e-4};  // peak learning rates tried
  int64_t steps = 2000;                    // AdamW steps per learning rate
  int64_t checks = 20;                     // held-apart checks per learning rate (evenly spaced)
  int64_t batch_size = 256;                // state sequences per step
  double weight_decay = 0.05;
  int64_t heads = 4;  // attention heads (divide the state width)
  double mlp_ratio = 4.0;
  double holdout_fraction = 0.1;      // of the training images
  uint64_t seed = 0;                  // held-apart images, initialisation, batch order
  std::function<void()> on_progress;  // after each check (may be empty)
};

struct TransformerClassifier {
  TaskHead head;      // transformer kind, eval mode, on the CPU
  double lr = 0;      // kept
  int64_t steps = 0;  // kept: the head after this many steps
  struct Trial {
    double lr = 0;
    std::vector<std::pair<int64_t, double>> held_accuracy;  // (steps, top-1) at each check
  };
  std::vector<Trial> sweep;
};

// Fits on x [V, N, S, D]: V state sequences per image (1 for ViT mode, K for
// the K glimpses), labels [N] in [0, classes). Images, not rows, are held
// apart. Throws std::invalid_argument on empty or mismatched inputs.
TransformerClassifier fit_transformer_probe(const at::Tensor& x, const at::Tensor& labels,
                                            int64_t classes,
                                            const TransformerProbeOptions& options = {});

}  // namespace saccade::probe
