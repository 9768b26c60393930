// Heads on the backbone's state tokens: the DINO projection head (first state
// token only, paper "Architectures") and the two task heads.
#pragma once

#include <torch/torch.h>

#include "model/layers.h"
#include "model/options.h"

namespace saccade::model {

// 3-layer MLP (GELU) -> bottleneck -> L2 normalise -> weight-normalised
// Linear(bottleneck -> K, no bias). Names: mlp.0, mlp.2, mlp.4 (Linear),
// last_layer.weight_g [K, 1], last_layer.weight_v [K, bottleneck] (PyTorch's
// weight_norm names: weight = g * v / ||v|| row-wise).
class DinoHeadImpl : public torch::nn::Module {
 public:
  explicit DinoHeadImpl(const DinoHeadOptions& options);
  // first_state: [B, in_dim] (StepOutput::state[:, 0]) -> prototype scores [B, K].
  torch::Tensor forward(const torch::Tensor& first_state);
  // DINO keeps the prototypes frozen during the first epoch: this toggles
  // requires_grad of last_layer (g stays frozen unless train_prototype_scale).
  void set_last_layer_trainable(bool trainable);
  const DinoHeadOptions& options() const { return options_; }

 private:
  DinoHeadOptions options_;
  torch::nn::Sequential mlp_{nullptr};
  torch::Tensor weight_g_, weight_v_;
  std::shared_ptr<torch::nn::Module> last_layer_;  // holds weight_g / weight_v under "last_layer"
};
TORCH_MODULE(DinoHead);

// Linear on the first state token, or a one-layer transformer over
// [learned query, standardised state tokens] whose query output goes through
// a LayerNorm and a Linear. Names: linear.{weight,bias}; query, state_pos,
// block.*, norm.*, and the buffers input_mean / input_scale [1, n_state,
// in_dim] (0 and 1 until set_input_statistics: a probe sets them from the
// features it is fitted on, as a linear probe standardises its inputs).
class TaskHeadImpl : public torch::nn::Module {
 public:
  explicit TaskHeadImpl(const TaskHeadOptions& options);
  // state: [B, n_state, in_dim] -> logits [B, n_classes].
  torch::Tensor forward(const torch::Tensor& state);
  const TaskHeadOptions& options() const { return options_; }
  // Transformer kind: inputs become (state - mean) / scale, both [n_state, in_dim].
  void set_input_statistics(const torch::Tensor& mean, const torch::Tensor& scale);

 private:
  TaskHeadOptions options_;
  torch::Tensor query_, state_pos_, input_mean_, input_scale_;  // transformer kind only
  Block block_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(TaskHead);

}  // namespace saccade::model
