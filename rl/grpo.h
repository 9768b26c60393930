// Group Relative Policy Optimization as the paper uses it for the gaze policy
// (section "Gaze Policy Optimization via GRPO"; DeepSeekMath's GRPO): a group of
// G traces per image, T steps each, a reward after every step, discounted
// returns normalised per image AND per step across the group, and the clipped
// surrogate of DeepSeekMath with an optional KL penalty to a reference policy.
// Tensors only: the caller owns the models and the rollouts.
#pragma once

#include <ATen/core/Tensor.h>

namespace saccade::rl {

// What a trace is rewarded for after each glimpse (policy.reward), from the
// task head's probability p_t of the true class and its correctness c_t:
enum class RewardKind {
  kProbability,   // R_t = p_t: every glimpse counts (the paper's)
  kIncrease,      // R_t = p_t - p_{t-1} (p_{-1} = 0): what this glimpse added
  kFinalCorrect,  // R_{T-1} = c_{T-1}, 0 before: only the answer at the end
};

// probability [T, ...] in [0, 1], correct [T, ...] (bool or 0/1) -> rewards
// [T, ...] of `kind` (float). Throws std::invalid_argument on mismatched shapes
// or a tensor without a step dimension.
at::Tensor step_rewards(const at::Tensor& probability, const at::Tensor& correct, RewardKind kind);

// rewards [T, ...] -> returns [T, ...]: G_t = sum_{t' >= t} gamma^(t' - t) R_t'.
// Throws std::invalid_argument on gamma outside [0, 1] or a tensor without a step dimension.
at::Tensor discounted_returns(const at::Tensor& rewards, double gamma);

// returns [T, B, G] -> advantages [T, B, G] = (G_{t,b,i} - mean_i) / (std_i + eps): each
// image's group is compared with itself at each step, so the advantage says which of
// its traces looked better there, whatever the image's difficulty. A group whose
// returns are all equal gets zero advantages (no signal, no noise). std is the
// population std of the group. Throws std::invalid_argument when G < 2.
at::Tensor group_advantages(const at::Tensor& returns, double eps = 1e-6);

struct GrpoLoss {
  at::Tensor loss;           // scalar to minimise: -(surrogate) + kl_beta * kl
  at::Tensor surrogate;      // mean of min(r A, clip(r, 1 - eps, 1 + eps) A), detached
  at::Tensor kl;             // mean KL estimate to the reference (0 without one), detached
  at::Tensor clip_fraction;  // share of (trace, step) pairs whose ratio was clipped, detached
};

// log_prob: [...] under the policy being trained (differentiable);
// old_log_prob: the same entries under the policy that sampled them;
// ref_log_prob: under the reference policy, or undefined (then kl_beta must be 0);
// advantages: same shape. r = exp(log_prob - old_log_prob). KL estimator (k3):
// pi_ref / pi - log(pi_ref / pi) - 1 >= 0. Every entry weighs the same.
GrpoLoss grpo_loss(const at::Tensor& log_prob, const at::Tensor& old_log_prob,
                   const at::Tensor& advantages, double clip_eps,
                   const at::Tensor& ref_log_prob = {}, double kl_beta = 0.0);

}  // namespace saccade::rl
