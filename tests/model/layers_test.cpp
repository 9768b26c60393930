// The transformer block's LayerScale folded into the linear layer before it: the same
// function, with the same gradients, as LayerScale applied to that layer's output. The
// attention: its formula, and q, k, v split from one projection without a zero-filled
// gradient of all of it. Linear layers on tokens: one product, the bias inside it. The MLP's
// GELU as the model chooses it.
#include "model/layers.h"

#include "model/fused_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

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

// How many times each autograd node kind appears in the graph of `out`.
std::map<std::string, int> node_counts(const torch::Tensor& out) {
  std::map<std::string, int> counts;
  std::vector<torch::autograd::Node*> todo = {out.grad_fn().get()}, seen;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (node == nullptr || std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    seen.push_back(node);
    ++counts[node->name()];
    for (const torch::autograd::Edge& edge : node->next_edges())
      todo.push_back(edge.function.get());
  }
  return counts;
}

// Names of the autograd nodes that computing `out` went through.
std::set<std::string> backward_nodes(const torch::Tensor& out) {
  std::set<std::string> names;
  for (const auto& [name, count] : node_counts(out)) names.insert(name);
  return names;
}

// softmax(q k^T / sqrt(d)) v per head, q, k, v the thirds of one projection (timm's layout:
// [q | k | v], heads side by side within each), with its gradients; and the split is one
// node whose backward stacks the three gradients, not three selects whose backward each
// writes a zero tensor the size of the projection (the trace of a GPU step shows them).
TEST(Attention, IsItsFormulaAndSplitsQkvWithoutZeroFilledGradients) {
  torch::manual_seed(5);
  const int64_t heads = 4, width = 32, d = width / heads;
  Attention attn(width, heads);
  auto qkv_layer = attn->named_modules()["qkv"]->as<torch::nn::Linear>();
  ASSERT_NE(qkv_layer, nullptr);
  const torch::Tensor input = torch::randn({2, 5, width});
  torch::Tensor x = input.clone().requires_grad_(true);
  const torch::Tensor out = attn->mix(x);
  const torch::Tensor weights = torch::linspace(-1, 1, out.numel()).reshape(out.sizes());
  (out * weights).sum().backward();
  const torch::Tensor grad = x.grad().clone(), weight_grad = qkv_layer->weight.grad().clone();

  torch::Tensor y = input.clone().requires_grad_(true);
  qkv_layer->weight.mutable_grad() = torch::Tensor();
  const torch::Tensor qkv = torch::nn::functional::linear(y, qkv_layer->weight, qkv_layer->bias);
  std::vector<torch::Tensor> per_head;
  for (int64_t h = 0; h < heads; ++h) {
    const torch::Tensor q = qkv.narrow(2, h * d, d), k = qkv.narrow(2, width + h * d, d),
                        v = qkv.narrow(2, 2 * width + h * d, d);
    const torch::Tensor p =
        torch::softmax(torch::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(d)), -1);
    per_head.push_back(torch::matmul(p, v));
  }
  const torch::Tensor want = torch::cat(per_head, 2);
  (want * weights).sum().backward();
  EXPECT_TRUE(torch::allclose(out, want, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(grad, y.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(weight_grad, qkv_layer->weight.grad(), 1e-5, 1e-6));

  const std::set<std::string> nodes = backward_nodes(out);
  EXPECT_EQ(nodes.count("SelectBackward0"), 0u);
  EXPECT_EQ(nodes.count("UnbindBackward0"), 1u);
}

// Three passes through a block in one ReuseFoldedLayerScale scope: the folded weights are
// computed once (one product per folded weight and bias in the graph, not three), the
// outputs and every gradient are those of three passes folding afresh, a pass without
// gradient before them does not lend them its grad-less weights,
// and a new scope after a weight update folds the updated weights.
TEST(Block, FoldedLayerScaleComputedOncePerScopeTrainsTheSame) {
  torch::manual_seed(7);
  Block block(32, 4, 64, 0.5, 1e-6);
  const torch::Tensor x = torch::randn({2, 5, 32});
  auto passes = [&](bool reuse) {
    block->zero_grad();
    const ReuseFoldedLayerScale scope(reuse);
    {
      torch::NoGradGuard no_grad;
      block->forward(x * 2);
    }
    return block->forward(x).sum() + block->forward(x * 3).pow(2).sum() +
           block->forward(x - 1).mean();
  };
  const torch::Tensor fresh = passes(false);
  const int fresh_products = node_counts(fresh)["MulBackward0"];
  fresh.backward();
  std::map<std::string, torch::Tensor> want;
  for (const auto& item : block->named_parameters()) want[item.key()] = item.value().grad().clone();
  const torch::Tensor reused = passes(true);
  EXPECT_EQ(node_counts(reused)["MulBackward0"], fresh_products / 3);
  reused.backward();
  EXPECT_NEAR(reused.item<double>(), fresh.item<double>(), 1e-6 * std::fabs(fresh.item<double>()));
  for (const auto& item : block->named_parameters()) {
    const torch::Tensor& g = item.value().grad();
    ASSERT_TRUE(g.defined()) << item.key();
    EXPECT_TRUE(torch::allclose(g, want.at(item.key()), 1e-5, 1e-6)) << item.key();
  }
  {
    const ReuseFoldedLayerScale scope;
    block->forward(x);
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& p : block->parameters()) p.mul_(1.1);
  }
  torch::Tensor want_after;
  {
    const ReuseFoldedLayerScale off(false);
    want_after = block->forward(x).detach();
  }
  const ReuseFoldedLayerScale scope;
  EXPECT_TRUE(torch::equal(block->forward(x).detach(), want_after))
      << "a new scope folded the weights of before the update";
}

// A linear layer on tokens [B, N, in] is one matrix product with the bias added inside it:
// the graph holds an addmm and no separate add (torch::nn::Linear's forward adds the bias to
// a 3-d input in a kernel of its own), and the values are the layer's.
TEST(Linear, TokensGoThroughOneProductWithTheBiasInside) {
  torch::manual_seed(6);
  torch::nn::Linear layer(16, 24);
  const torch::Tensor x = torch::randn({3, 7, 16}, torch::requires_grad());
  const torch::Tensor y = linear(layer, x);
  EXPECT_TRUE(torch::allclose(y, layer(x), 1e-5, 1e-6));
  const std::set<std::string> nodes = backward_nodes(y);
  EXPECT_EQ(nodes.count("AddmmBackward0"), 1u);
  EXPECT_EQ(nodes.count("AddBackward0"), 0u);
  EXPECT_EQ(backward_nodes(layer(x)).count("AddBackward0"), 1u) << "the frontend's forward";
}

// model.gelu reaches the blocks' MLPs: the tanh form is another function (within a thousandth
// of erf's), exactly LibTorch's gelu(x, "tanh") between the two layers, folded LayerScale or
// not. On a CPU a scope that fuses the MLP changes nothing: the fused products are CUDA's.
TEST(Mlp, TheBlocksGeluIsTheModelsChoiceAndFusesOnlyOnAGpu) {
  torch::manual_seed(8);
  using Gelu = BackboneOptions::Gelu;
  Block erf(32, 4, 128, 1.0, 1e-6, Gelu::kErf), tanh(32, 4, 128, 1.0, 1e-6, Gelu::kTanh);
  {
    torch::NoGradGuard no_grad;
    const auto from = erf->named_parameters();
    for (auto& p : tanh->named_parameters()) p.value().copy_(from[p.key()]);
  }
  const torch::Tensor x = torch::randn({2, 9, 32}) * 2;
  const torch::Tensor a = erf->forward(x), b = tanh->forward(x);
  const double gap = (a - b).abs().max().item<double>();
  EXPECT_GT(gap, 1e-6) << "model.gelu did not reach the block";
  EXPECT_LT(gap, 1e-2);

  Mlp mlp(32, 128, 16, Gelu::kTanh);
  const torch::Tensor expected = at::linear(
      at::gelu(
          at::linear(x, mlp->named_parameters()["fc1.weight"], mlp->named_parameters()["fc1.bias"]),
          "tanh"),
      mlp->fc2()->weight, mlp->fc2()->bias);
  EXPECT_TRUE(torch::equal(mlp(x), expected));

  for (const bool folded : {true, false}) {
    set_folded_layerscale(folded);
    const torch::Tensor plain = tanh->forward(x);
    const FusedScope fused({.mlp = true});
    EXPECT_TRUE(torch::equal(tanh->forward(x), plain)) << "folded " << folded;
  }
  set_folded_layerscale(true);
}

}  // namespace
}  // namespace saccade::model
