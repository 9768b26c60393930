// The transformer block's LayerScale folded into the linear layer before it: the same
// function, with the same gradients, as LayerScale applied to that layer's output.
#include "model/layers.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace saccade::model {
namespace {

struct Pass {
  torch::Tensor out, input_grad;
  std::map<std::string, torch::Tensor> grads;
};

Pass run_block(Block& block, const torch::Tensor& input, bool folded) {
  set_folded_layerscale(folded);
  block->zero_grad();
  torch::Tensor x = input.clone().requires_grad_(true);
  torch::Tensor out = block->forward(x);
  // A weighted sum: every output element gets its own gradient.
  const torch::Tensor weights = torch::linspace(-1, 1, out.numel()).reshape(out.sizes());
  (out * weights).sum().backward();
  Pass p{out.detach(), x.grad().clone(), {}};
  for (const auto& item : block->named_parameters())
    p.grads[item.key()] = item.value().grad().clone();
  set_folded_layerscale(true);
  return p;
}

TEST(Block, FoldedLayerScaleIsTheSameFunctionWithTheSameGradients) {
  torch::manual_seed(3);
  Block block(32, 4, 64, 1e-5, 1e-6);
  {
    torch::NoGradGuard no_grad;
    // Per-channel gammas of different sizes and non-zero biases: a fold on the wrong
    // axis, or one that leaves the bias unscaled, gives another function.
    for (auto& item : block->named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& p = item.value();
      if (name.find("gamma") != std::string::npos)
        p.copy_(torch::rand_like(p) * 1.5 + 0.05);
      else if (name.find("bias") != std::string::npos)
        p.copy_(torch::randn_like(p) * 0.1);
    }
  }
  const torch::Tensor x = torch::randn({3, 7, 32});
  const Pass folded = run_block(block, x, true);
  const Pass plain = run_block(block, x, false);
  EXPECT_TRUE(torch::allclose(folded.out, plain.out, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(folded.input_grad, plain.input_grad, 1e-5, 1e-6));
  ASSERT_EQ(folded.grads.size(), plain.grads.size());
  for (const auto& [name, g] : plain.grads) {
    const torch::Tensor& f = folded.grads.at(name);
    const double scale = g.abs().max().item<double>();
    EXPECT_GT(scale, 0) << name << " got no gradient";
    EXPECT_LE((f - g).abs().max().item<double>(), 1e-5 * scale) << name;
  }
  EXPECT_TRUE(folded_layerscale()) << "the default is restored";
}

// The fold is what runs: folded, the scaled linear's output comes from the matrix product
// itself; applied after, from a product by gamma (the activation-sized kernel the fold
// removes).
TEST(Block, FoldedLayerScaleRunsNoActivationSizedProduct) {
  torch::manual_seed(4);
  LayerScale scale(8, 0.5);
  torch::nn::Linear linear(6, 8);
  const torch::Tensor x = torch::randn({5, 6});
  set_folded_layerscale(false);
  const std::string applied = scale->of_linear(linear, x).grad_fn()->name();
  set_folded_layerscale(true);
  const std::string folded = scale->of_linear(linear, x).grad_fn()->name();
  EXPECT_EQ(applied, "MulBackward0");
  EXPECT_NE(folded, "MulBackward0");
  EXPECT_NE(folded.find("mm"), std::string::npos) << folded;  // AddmmBackward0
}

}  // namespace
}  // namespace saccade::model
