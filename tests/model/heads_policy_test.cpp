// DINO head, task heads, gaze policy and its Gaussian mixture.
#include <cmath>

#include <gtest/gtest.h>

#include "model/heads.h"
#include "model/policy.h"

namespace saccade::model {
namespace {

TEST(DinoHead, ShapesNormalisationAndFrozenLastLayer) {
  torch::manual_seed(3);
  DinoHeadOptions o;
  o.in_dim = 64;
  o.hidden_dim = 128;
  o.bottleneck_dim = 32;
  o.n_prototypes = 100;
  DinoHead head(o);
  auto x = torch::randn({5, 64});
  auto scores = head->forward(x);
  EXPECT_EQ(scores.sizes(), (std::vector<int64_t>{5, 100}));
  // Prototypes have unit norm (g = 1) and the bottleneck is L2-normalised: |score| <= 1.
  EXPECT_LE(scores.abs().max().item<double>(), 1.0 + 1e-5);
  // Direct computation of the same head from its named parameters.
  auto params = head->named_parameters();
  auto h =
      torch::gelu(torch::nn::functional::linear(x, params["mlp.0.weight"], params["mlp.0.bias"]));
  h = torch::gelu(torch::nn::functional::linear(h, params["mlp.2.weight"], params["mlp.2.bias"]));
  h = torch::nn::functional::linear(h, params["mlp.4.weight"], params["mlp.4.bias"]);
  h = h / h.norm(2, -1, true);
  auto v = params["last_layer.weight_v"];
  auto expected = torch::matmul(h, (v / v.norm(2, -1, true)).t());
  EXPECT_TRUE(torch::allclose(scores, expected, 1e-5, 1e-5));
  EXPECT_FALSE(params["last_layer.weight_g"].requires_grad());

  head->set_last_layer_trainable(false);
  head->forward(x).sum().backward();
  EXPECT_FALSE(params["last_layer.weight_v"].grad().defined());
  EXPECT_TRUE(params["mlp.0.weight"].grad().defined());
  head->set_last_layer_trainable(true);
  head->forward(x).sum().backward();
  EXPECT_TRUE(params["last_layer.weight_v"].grad().defined());
  EXPECT_THROW(head->forward(torch::randn({5, 63})), std::invalid_argument);
}

TEST(TaskHead, LinearReadsOnlyTheFirstStateToken) {
  torch::manual_seed(4);
  TaskHeadOptions o;
  o.in_dim = 32;
  o.n_classes = 7;
  TaskHead head(o);
  auto state = torch::randn({3, 8, 32});
  auto logits = head->forward(state);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 7}));
  auto other = state.clone();
  other.narrow(1, 1, 7).normal_();
  EXPECT_TRUE(torch::allclose(head->forward(other), logits));
}

TEST(TaskHead, TransformerPoolsAllStateTokens) {
  torch::manual_seed(5);
  TaskHeadOptions o;
  o.kind = TaskHeadOptions::Kind::kTransformer;
  o.in_dim = 32;
  o.heads = 4;
  o.n_classes = 7;
  TaskHead head(o);
  auto state = torch::randn({3, 8, 32});
  auto logits = head->forward(state);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 7}));
  auto other = state.clone();
  other.select(1, 5).normal_();  // a later state token changes the logits
  EXPECT_FALSE(torch::allclose(head->forward(other), logits, 1e-4, 1e-4));
  EXPECT_THROW(head->forward(torch::randn({3, 7, 32})), std::invalid_argument);
  // Standardising the inputs: shifting and scaling them together leaves the logits as they were.
  head->set_input_statistics(torch::full({8, 32}, 5.0), torch::full({8, 32}, 3.0));
  EXPECT_TRUE(torch::allclose(head->forward(state * 3 + 5), logits, 1e-4, 1e-4));
  EXPECT_TRUE(head->named_buffers().contains("input_mean")) << "saved with the head";
  EXPECT_THROW(head->set_input_statistics(torch::zeros({8, 31}), torch::ones({8, 32})),
               std::invalid_argument);
}

TEST(GazePolicy, MeansStayInsideTheImage) {
  torch::manual_seed(6);
  PolicyOptions o;
  o.in_dim = 48;
  o.width = 32;
  o.heads = 4;
  o.depth = 2;
  o.n_mix = 3;
  GazePolicy policy(o);
  auto state = torch::randn({4, 8, 48}) * 10;
  auto extent = torch::tensor({{1.0, 1.0}, {1.5, 1.0}, {1.0, 3.0}, {2.0, 1.0}});
  auto out = policy->forward(state, extent);
  EXPECT_EQ(out.means.sizes(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE((out.means >= 0).all().item<bool>());
  EXPECT_TRUE((out.means <= extent.unsqueeze(1)).all().item<bool>());
  // The policy never trains the backbone: no gradient reaches the state.
  auto s = torch::randn({4, 8, 48}, torch::requires_grad());
  auto mix = policy->distribution(s, extent, 0.1);
  mix.log_prob(mix.sample()).sum().backward();
  EXPECT_FALSE(s.grad().defined());
  EXPECT_TRUE(policy->named_parameters()["queries"].grad().defined());
  EXPECT_THROW(policy->forward(state, torch::ones({4, 3})), std::invalid_argument);
  EXPECT_THROW(policy->forward(state, torch::full({4, 2}, 0.5)), std::invalid_argument);
}

TEST(GaussianMixture, LogProbMatchesADirectComputation) {
  torch::manual_seed(7);
  auto means = torch::rand({2, 3, 2}, torch::kDouble);
  auto logits = torch::randn({2, 3}, torch::kDouble);
  const double std = 0.2;
  GaussianMixture mix(means, logits, std, torch::ones({2, 2}, torch::kDouble));
  auto x = torch::rand({2, 2}, torch::kDouble);
  auto lp = mix.log_prob(x);
  for (int64_t b = 0; b < 2; ++b) {
    double z = 0, p = 0;
    for (int64_t m = 0; m < 3; ++m) z += std::exp(logits[b][m].item<double>());
    for (int64_t m = 0; m < 3; ++m) {
      double density = std::exp(logits[b][m].item<double>()) / z;
      for (int64_t d = 0; d < 2; ++d) {
        const double diff = x[b][d].item<double>() - means[b][m][d].item<double>();
        density *= std::exp(-diff * diff / (2 * std * std)) / (std::sqrt(2 * M_PI) * std);
      }
      p += density;
    }
    EXPECT_NEAR(lp[b].item<double>(), std::log(p), 1e-10);
  }
}

TEST(GaussianMixture, SamplesStayInsideTheImageAndFollowTheWeights) {
  torch::manual_seed(8);
  // Two components, one on the right border of a 2 x 1 image with a wide std.
  auto means = torch::tensor({{{0.5, 0.5}, {2.0, 0.9}}});
  auto logits = torch::tensor({{std::log(0.25), std::log(0.75)}});
  auto extent = torch::tensor({{2.0, 1.0}});
  GaussianMixture mix(means.expand({4000, 2, 2}), logits.expand({4000, 2}), 0.05,
                      extent.expand({4000, 2}));
  auto x = mix.sample();
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{4000, 2}));
  EXPECT_TRUE((x >= 0).all().item<bool>());
  EXPECT_TRUE((x.select(1, 0) <= 2.0).all().item<bool>());
  EXPECT_TRUE((x.select(1, 1) <= 1.0).all().item<bool>());
  const double right = (x.select(1, 0) > 1.25).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(right, 0.75, 0.03);  // 4000 draws: std of the fraction ~0.007

  GaussianMixture wide(means, logits, 1.0, extent);
  for (int i = 0; i < 200; ++i) {
    auto y = wide.sample();
    ASSERT_TRUE((y >= 0).all().item<bool>() && (y <= extent).all().item<bool>());
  }
}

TEST(GaussianMixture, SamplesFromUniformsFollowTheMixtureRowByRow) {
  torch::manual_seed(10);
  auto means = torch::tensor({{{0.5, 0.5}, {1.5, 0.5}}});
  auto logits = torch::tensor({{std::log(0.25), std::log(0.75)}});
  auto extent = torch::tensor({{2.0, 1.0}});
  const int64_t n = 4000;
  GaussianMixture mix(means.expand({n, 2, 2}), logits.expand({n, 2}), 0.05, extent.expand({n, 2}));
  const torch::Tensor u = torch::rand({n, 3}, torch::kFloat64);
  const torch::Tensor x = mix.sample_from_uniforms(u);
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{n, 2}));
  // Column 0 below 0.25 picks the first component, above it the second.
  const torch::Tensor right = x.select(1, 0) > 1.0;
  EXPECT_TRUE(torch::equal(right, u.select(1, 0) >= 0.25));
  EXPECT_NEAR(right.to(torch::kDouble).mean().item<double>(), 0.75, 0.03);
  // Noise of std 0.05 around the chosen mean.
  const torch::Tensor chosen = torch::where(right, torch::full({n}, 1.5), torch::full({n}, 0.5));
  const torch::Tensor dx = x.select(1, 0).to(torch::kDouble) - chosen;
  EXPECT_NEAR(dx.mean().item<double>(), 0.0, 0.005);
  EXPECT_NEAR(dx.std().item<double>(), 0.05, 0.005);
  // A row's draw is its own: the first 10 rows drawn alone give the same points.
  GaussianMixture few(means.expand({10, 2, 2}), logits.expand({10, 2}), 0.05,
                      extent.expand({10, 2}));
  EXPECT_TRUE(torch::equal(few.sample_from_uniforms(u.slice(0, 0, 10)), x.slice(0, 0, 10)));
  // A wide std is clamped into the image.
  GaussianMixture wide(means.expand({n, 2, 2}), logits.expand({n, 2}), 1.0, extent.expand({n, 2}));
  const torch::Tensor y = wide.sample_from_uniforms(u);
  EXPECT_TRUE((y >= 0).all().item<bool>() && (y <= extent).all().item<bool>());
  EXPECT_THROW(mix.sample_from_uniforms(torch::rand({n, 2})), std::invalid_argument);
}

TEST(GaussianMixture, EntropyEstimators) {
  torch::manual_seed(9);
  const double std = 0.01;
  // Far-apart components: the upper bound is (nearly) exact, and the MC estimate agrees.
  auto means = torch::tensor({{{0.1, 0.1}, {0.9, 0.9}, {0.1, 0.9}}});
  auto logits = torch::tensor({{0.0, 1.0, -1.0}});
  GaussianMixture mix(means, logits, std, torch::ones({1, 2}));
  auto pi = torch::softmax(logits, -1);
  const double expected =
      -(pi * pi.log()).sum().item<double>() + std::log(2 * M_PI * M_E * std * std);
  EXPECT_NEAR(mix.entropy_upper_bound().item<double>(), expected, 1e-5);
  EXPECT_NEAR(mix.entropy_monte_carlo(20000).item<double>(), expected, 0.03);
  // Coincident components: the true entropy is that of one Gaussian, below the bound.
  GaussianMixture same(torch::full({1, 3, 2}, 0.5), logits, std, torch::ones({1, 2}));
  EXPECT_NEAR(same.entropy_monte_carlo(20000).item<double>(), std::log(2 * M_PI * M_E * std * std),
              0.03);
  EXPECT_GT(same.entropy_upper_bound().item<double>(),
            same.entropy_monte_carlo(20000).item<double>());
}

}  // namespace
}  // namespace saccade::model
