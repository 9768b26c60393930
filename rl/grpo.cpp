#include "rl/grpo.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace saccade::rl {

at::Tensor step_rewards(const at::Tensor& probability, const at::Tensor& correct, RewardKind kind) {
  if (!probability.defined() || !correct.defined() || probability.dim() < 1 ||
      probability.size(0) < 1 || probability.sizes() != correct.sizes())
    throw std::invalid_argument(
        "step_rewards: expected probability and correct of one shape [T, ...] with T >= 1");
  const at::Tensor p = probability.to(torch::kFloat32);
  switch (kind) {
    case RewardKind::kProbability:
      return p;
    case RewardKind::kIncrease: {
      at::Tensor before = torch::zeros_like(p);
      before.slice(0, 1).copy_(p.slice(0, 0, p.size(0) - 1));
      return p - before;
    }
    case RewardKind::kFinalCorrect: {
      at::Tensor r = torch::zeros_like(p);
      r[p.size(0) - 1].copy_(correct[p.size(0) - 1].to(torch::kFloat32));
      return r;
    }
  }
  throw std::invalid_argument("step_rewards: unknown reward kind");
}

at::Tensor discounted_returns(const at::Tensor& rewards, double gamma) {
  if (!(gamma >= 0.0 && gamma <= 1.0))
    throw std::invalid_argument(fmt::format("discounted_returns: gamma {} outside [0, 1]", gamma));
  if (!rewards.defined() || rewards.dim() < 1 || rewards.size(0) < 1)
    throw std::invalid_argument("discounted_returns: expected rewards [T, ...] with T >= 1");
  at::Tensor returns = torch::empty_like(rewards);
  at::Tensor running = torch::zeros_like(rewards[0]);
  for (int64_t t = rewards.size(0) - 1; t >= 0; --t) {
    running = rewards[t] + gamma * running;
    returns[t].copy_(running);
  }
  return returns;
}

at::Tensor group_advantages(const at::Tensor& returns, double eps) {
  if (!returns.defined() || returns.dim() != 3 || returns.size(2) < 2)
    throw std::invalid_argument(
        "group_advantages: expected returns [T, B, G] with a group of G >= 2 traces");
  const at::Tensor mean = returns.mean(2, /*keepdim=*/true);
  const at::Tensor centred = returns - mean;
  const at::Tensor stdev = centred.square().mean(2, /*keepdim=*/true).sqrt();
  return centred / (stdev + eps);
}

GrpoLoss grpo_loss(const at::Tensor& log_prob, const at::Tensor& old_log_prob,
                   const at::Tensor& advantages, double clip_eps, const at::Tensor& ref_log_prob,
                   double kl_beta) {
  if (!log_prob.defined() || !old_log_prob.defined() || !advantages.defined() ||
      log_prob.sizes() != old_log_prob.sizes() || log_prob.sizes() != advantages.sizes())
    throw std::invalid_argument(
        "grpo_loss: log_prob, old_log_prob and advantages must have the same shape");
  if (!(clip_eps >= 0.0)) throw std::invalid_argument("grpo_loss: clip_eps must be >= 0");
  if (kl_beta < 0.0 || (kl_beta > 0.0 && !ref_log_prob.defined()))
    throw std::invalid_argument("grpo_loss: kl_beta > 0 needs the reference policy's log_prob");
  if (ref_log_prob.defined() && ref_log_prob.sizes() != log_prob.sizes())
    throw std::invalid_argument("grpo_loss: ref_log_prob must have log_prob's shape");
  const at::Tensor adv = advantages.detach();
  const at::Tensor ratio = (log_prob - old_log_prob.detach()).exp();
  const at::Tensor clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps);
  const at::Tensor surrogate = torch::minimum(ratio * adv, clipped * adv).mean();
  GrpoLoss out;
  out.loss = -surrogate;
  out.kl = torch::zeros({}, log_prob.options()).detach();
  if (ref_log_prob.defined()) {
    const at::Tensor log_ref_over_pi = ref_log_prob.detach() - log_prob;
    const at::Tensor kl = (log_ref_over_pi.exp() - log_ref_over_pi - 1.0).mean();
    if (kl_beta > 0.0) out.loss = out.loss + kl_beta * kl;
    out.kl = kl.detach();
  }
  out.surrogate = surrogate.detach();
  out.clip_fraction = (ratio.detach() - clipped.detach()).abs().gt(0).to(at::kFloat).mean();
  return out;
}

}  // namespace saccade::rl
