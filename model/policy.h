// The gaze policy (paper "Gaze Policy"; GRPO as in DeepSeekMath, docs/references.md) and the
// Gaussian mixture it parameterises. Coordinates are image-relative with the short side = 1 (origin
// top-left, x right, y down): an image spans [0, W/min] x [0, H/min].
#pragma once

#include <torch/torch.h>

#include "model/layers.h"
#include "model/options.h"

namespace saccade::model {

// A mixture of 2-D Gaussians with one fixed isotropic std (the std comes from a
// schedule owned by the trainer). Batched: means [B, M, 2], logits [B, M].
class GaussianMixture {
 public:
  // extent: [B, 2] = (W / min(W, H), H / min(W, H)); samples are clamped into [0, extent].
  GaussianMixture(torch::Tensor means, torch::Tensor logits, double std, torch::Tensor extent);

  // [B, 2] points inside the image. The component is drawn from softmax(logits),
  // then mean + std * N(0, 1), then clamped to the image (a draw past the border
  // lands on it). No gradient flows through a sample.
  torch::Tensor sample(c10::optional<torch::Generator> generator = c10::nullopt) const;

  // The same draw from caller-supplied uniforms [B, 3] in [0, 1): column 0
  // picks the component (inverse CDF of softmax(logits)), columns 1-2 give the
  // noise (Box-Muller). Each row depends on its own uniforms only, so a trace's
  // gaze does not depend on which batch it was drawn in (rollouts split across
  // actors draw what one process would). Returns [B, 2] fp32 on the CPU.
  torch::Tensor sample_from_uniforms(const torch::Tensor& uniforms) const;

  // log p(x) of the (untruncated) mixture: x [B, 2] -> [B], differentiable in
  // means and logits: logsumexp_m(log_softmax(logits)_m + sum_d log N(x_d; mu_md, std)).
  torch::Tensor log_prob(const torch::Tensor& x) const;

  // Entropy has no closed form for a mixture. entropy_upper_bound() is
  // H(softmax(logits)) + sum_m pi_m H(N_m) = H(pi) + log(2 pi e std^2) (exact
  // when components do not overlap; differentiable in the logits only, since
  // std is fixed). entropy_monte_carlo(n) = -mean log p(x_s) over n samples
  // per batch row: an unbiased estimate for logging, not for gradients.
  torch::Tensor entropy_upper_bound() const;
  // H(softmax(logits)) [B]: the entropy of the weights alone (0 = one component decides).
  torch::Tensor weight_entropy() const;
  torch::Tensor entropy_monte_carlo(int64_t n_samples,
                                    c10::optional<torch::Generator> generator = c10::nullopt) const;

  const torch::Tensor& means() const { return means_; }
  const torch::Tensor& logits() const { return logits_; }
  double std() const { return std_; }

 private:
  torch::Tensor means_, logits_, extent_;
  double std_;
};

// Transformer over [projected state tokens + state_pos, n_mix + 1 learned queries].
// Names: in_proj, state_pos, queries, blocks.<i>.*, norm, mean_head, logit_head.
class GazePolicyImpl : public torch::nn::Module {
 public:
  explicit GazePolicyImpl(const PolicyOptions& options);

  struct Output {
    torch::Tensor means;   // [B, n_mix, 2], each inside [0, extent] (sigmoid * extent)
    torch::Tensor logits;  // [B, n_mix] mixture logits
  };
  // state: [B, n_state, in_dim] (read detached: the policy never trains the
  // backbone); extent: [B, 2] = (W / min, H / min).
  Output forward(const torch::Tensor& state, const torch::Tensor& extent);

  // forward() wrapped in a GaussianMixture with the scheduled std.
  GaussianMixture distribution(const torch::Tensor& state, const torch::Tensor& extent, double std);

  const PolicyOptions& options() const { return options_; }

 private:
  PolicyOptions options_;
  torch::nn::Linear in_proj_{nullptr};
  torch::Tensor state_pos_, queries_;
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear mean_head_{nullptr}, logit_head_{nullptr};
};
TORCH_MODULE(GazePolicy);

}  // namespace saccade::model
