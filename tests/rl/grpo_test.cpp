#include "rl/grpo.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/policy.h"

namespace saccade::rl {
namespace {

// Two traces of three glimpses: p = (0.2, 0.5, 0.4) and (0.6, 0.6, 0.9).
TEST(StepRewards, EachKindRewardsWhatItSays) {
  const torch::Tensor p = torch::tensor({0.2, 0.6, 0.5, 0.6, 0.4, 0.9}).reshape({3, 2});
  const torch::Tensor c = torch::tensor({false, true, true, true, false, true}).reshape({3, 2});
  EXPECT_TRUE(torch::allclose(step_rewards(p, c, RewardKind::kProbability), p.to(torch::kFloat32)));
  const torch::Tensor increase = step_rewards(p, c, RewardKind::kIncrease);
  EXPECT_TRUE(torch::allclose(
      increase, torch::tensor({0.2f, 0.6f, 0.3f, 0.0f, -0.1f, 0.3f}).reshape({3, 2})));
  // Undiscounted, the increases add up to the last glimpse's probability.
  EXPECT_TRUE(torch::allclose(discounted_returns(increase, 1.0)[0], p[2].to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(step_rewards(p, c, RewardKind::kFinalCorrect),
                           torch::tensor({0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f}).reshape({3, 2})));
  EXPECT_THROW(step_rewards(p, c.slice(0, 0, 2), RewardKind::kIncrease), std::invalid_argument);
  EXPECT_THROW(step_rewards(torch::Tensor(), c, RewardKind::kProbability), std::invalid_argument);
}

TEST(DiscountedReturns, SumDiscountedFutureRewards) {
  const torch::Tensor rewards = torch::tensor({1.0, 2.0, 4.0}).reshape({3, 1});
  const torch::Tensor r = discounted_returns(rewards, 0.5);
  EXPECT_DOUBLE_EQ(r[2].item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(r[1].item<double>(), 2.0 + 0.5 * 4.0);
  EXPECT_DOUBLE_EQ(r[0].item<double>(), 1.0 + 0.5 * 2.0 + 0.25 * 4.0);
  EXPECT_TRUE(discounted_returns(rewards, 0.0).equal(rewards));
  EXPECT_DOUBLE_EQ(discounted_returns(rewards, 1.0)[0].item<double>(), 7.0);
  // Trailing dimensions are independent traces.
  const torch::Tensor two = torch::tensor({1.0, 0.0, 0.0, 1.0}).reshape({2, 2});
  EXPECT_TRUE(
      discounted_returns(two, 0.9).equal(torch::tensor({1.0, 0.9, 0.0, 1.0}).reshape({2, 2})));
}

TEST(DiscountedReturns, RefusesBadInput) {
  EXPECT_THROW(discounted_returns(torch::ones({2, 2}), 1.5), std::invalid_argument);
  EXPECT_THROW(discounted_returns(torch::ones({2, 2}), std::nan("")), std::invalid_argument);
  EXPECT_THROW(discounted_returns(torch::Tensor(), 0.9), std::invalid_argument);
}

TEST(GroupAdvantages, NormalisedPerImageAndStep) {
  torch::manual_seed(3);
  const int64_t T = 3, B = 4, G = 8;
  const torch::Tensor returns = torch::randn({T, B, G}, torch::kFloat64);
  const torch::Tensor a = group_advantages(returns, 0.0);
  EXPECT_LT(a.mean(2).abs().max().item<double>(), 1e-12);
  EXPECT_LT((a.square().mean(2) - 1.0).abs().max().item<double>(), 1e-9);
  // An image-and-step offset and a positive scale change nothing: only the ranking inside a group.
  const torch::Tensor shifted = returns * 3.0 + torch::randn({T, B, 1}, torch::kFloat64) * 10.0;
  EXPECT_TRUE(torch::allclose(group_advantages(shifted, 0.0), a, 1e-9, 1e-9));
  // The best trace of a group gets the largest advantage.
  EXPECT_TRUE(a.argmax(2).equal(returns.argmax(2)));
}

TEST(GroupAdvantages, EqualReturnsGiveNoSignal) {
  const torch::Tensor a = group_advantages(torch::full({2, 3, 4}, 0.7), 1e-6);
  EXPECT_EQ(a.abs().max().item<float>(), 0.0f);
  EXPECT_FALSE(a.isnan().any().item<bool>());
  EXPECT_THROW(group_advantages(torch::ones({2, 3, 1})), std::invalid_argument);
  EXPECT_THROW(group_advantages(torch::ones({2, 3})), std::invalid_argument);
}

TEST(GrpoLoss, OnPolicyItIsThePolicyGradient) {
  const torch::Tensor old_lp = torch::tensor({-1.0, -2.0, -0.5, -3.0});
  const torch::Tensor lp = old_lp.clone().requires_grad_(true);
  const torch::Tensor adv = torch::tensor({1.0, -1.0, 0.5, 2.0});
  const GrpoLoss l = grpo_loss(lp, old_lp, adv, 0.2);
  EXPECT_NEAR(l.loss.item<double>(), -adv.mean().item<double>(), 1e-6);
  l.loss.backward();
  // d(-mean(r A))/d log_prob = -A / N at r = 1.
  EXPECT_TRUE(torch::allclose(lp.grad(), -adv / 4.0, 1e-6, 1e-6));
  EXPECT_EQ(l.clip_fraction.item<float>(), 0.0f);
  EXPECT_EQ(l.kl.item<float>(), 0.0f);
}

TEST(GrpoLoss, ClipStopsAPositiveAdvantageFromPushingTheRatioFurther) {
  const torch::Tensor old_lp = torch::zeros({2});
  // Ratios e^0.5 = 1.65 > 1.2 for both entries.
  const torch::Tensor lp = torch::full({2}, 0.5).requires_grad_(true);
  const torch::Tensor adv = torch::tensor({1.0, -1.0});
  const GrpoLoss l = grpo_loss(lp, old_lp, adv, 0.2);
  l.loss.backward();
  // A > 0: min picks the clipped (constant) term, no gradient; A < 0: the unclipped one
  // is smaller, so the gradient still pulls the ratio back.
  EXPECT_EQ(lp.grad()[0].item<float>(), 0.0f);
  EXPECT_GT(lp.grad()[1].item<float>(), 0.0f);
  EXPECT_NEAR(l.surrogate.item<double>(), (1.2 * 1.0 + std::exp(0.5) * -1.0) / 2.0, 1e-6);
  EXPECT_EQ(l.clip_fraction.item<float>(), 1.0f);
}

TEST(GrpoLoss, KlPenaltyIsZeroAtTheReferenceAndPullsTowardIt) {
  const torch::Tensor old_lp = torch::zeros({3});
  const torch::Tensor adv = torch::zeros({3});
  const torch::Tensor ref = torch::tensor({-0.1, 0.2, 0.0});
  const torch::Tensor at_ref = ref.clone().requires_grad_(true);
  EXPECT_NEAR(grpo_loss(at_ref, old_lp, adv, 0.2, ref, 0.5).kl.item<double>(), 0.0, 1e-7);
  const torch::Tensor lp = torch::tensor({0.3, -0.4, 0.1}).requires_grad_(true);
  const GrpoLoss l = grpo_loss(lp, old_lp, adv, 0.2, ref, 0.5);
  EXPECT_GT(l.kl.item<double>(), 0.0);
  l.loss.backward();
  // With zero advantages only the penalty acts: each log_prob moves toward the reference's.
  EXPECT_TRUE((lp.grad() * (lp.detach() - ref)).gt(0).all().item<bool>());
  EXPECT_THROW(grpo_loss(lp, old_lp, adv, 0.2, torch::Tensor(), 0.1), std::invalid_argument);
  EXPECT_THROW(grpo_loss(lp, old_lp, torch::zeros({2}), 0.2), std::invalid_argument);
}

// The whole loop on a known reward: a gaze policy learns to look where the reward is.
TEST(Grpo, TeachesAGazePolicyWhereTheRewardIs) {
  torch::manual_seed(11);
  model::PolicyOptions o;
  o.in_dim = 16;
  o.n_state = 2;
  o.width = 32;
  o.depth = 1;
  o.heads = 2;
  o.n_mix = 2;
  model::GazePolicy policy(o);
  torch::optim::Adam optimizer(policy->parameters(), torch::optim::AdamOptions(3e-3));
  const int64_t B = 8, G = 16;
  const torch::Tensor state = torch::randn({B * G, o.n_state, o.in_dim});
  const torch::Tensor extent = torch::ones({B * G, 2});
  const torch::Tensor target = torch::tensor({0.8f, 0.25f});
  // Wide enough (sigma 0.16) that the draws of every state's mixture earn some reward, so
  // every state gets an advantage to follow. With 0.02 a state whose mixture settled far
  // from the target earned none and stayed there, and float rounding decided which: on
  // OpenBLAS's Haswell kernels a third of the states, on SkylakeX's 3%.
  auto reward_of = [&](const torch::Tensor& gaze) {
    return torch::exp(-(gaze - target).square().sum(-1) / 0.05);
  };
  torch::Generator gen = at::detail::createCPUGenerator(5);
  double first_reward = 0, last_reward = 0;
  for (int it = 0; it < 150; ++it) {
    torch::Tensor gaze, old_lp;
    {
      torch::NoGradGuard no_grad;
      const model::GaussianMixture pi = policy->distribution(state, extent, 0.1);
      gaze = pi.sample(gen);
      old_lp = pi.log_prob(gaze);
    }
    const torch::Tensor reward = reward_of(gaze).reshape({1, B, G});
    if (it == 0) first_reward = reward.mean().item<double>();
    if (it >= 140) last_reward += reward.mean().item<double>() / 10;
    const torch::Tensor adv = group_advantages(discounted_returns(reward, 0.9));
    for (int u = 0; u < 2; ++u) {
      const torch::Tensor lp =
          policy->distribution(state, extent, 0.1).log_prob(gaze).reshape({1, B, G});
      const GrpoLoss l = grpo_loss(lp, old_lp.reshape({1, B, G}), adv, 0.2);
      optimizer.zero_grad();
      l.loss.backward();
      optimizer.step();
    }
  }
  EXPECT_GT(last_reward, first_reward + 0.3) << first_reward << " -> " << last_reward;
  torch::NoGradGuard no_grad;
  const auto out = policy->forward(state, extent);
  const torch::Tensor best = out.logits.argmax(1);
  const torch::Tensor mode =
      out.means.gather(1, best.view({-1, 1, 1}).expand({-1, 1, 2})).squeeze(1);
  // Every image's heaviest component sits on the target (all 128 of them on OpenBLAS's
  // Haswell, SkylakeX, Cooperlake and Sandybridge kernels alike).
  const torch::Tensor miss = (mode - target).norm(2, -1);
  EXPECT_GT(miss.lt(0.1).to(torch::kFloat).mean().item<double>(), 0.95) << miss;
  EXPECT_LT(miss.median().item<double>(), 0.05) << miss;
}

}  // namespace
}  // namespace saccade::rl
