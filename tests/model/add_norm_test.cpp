// The residual add + LayerNorm as one operation: through the fused kernels (the CPU loop here;
// the CUDA kernels are checked against it by kernels_cuda_tests) the same values and
// gradients as LibTorch's add and layer_norm, within float rounding, for the add's two inputs,
// the LayerNorm's weight and bias, and the gradient that reaches the sum along the residual
// stream; off, exactly LibTorch's operations. A backbone built of them trains the same.
#include "model/add_norm.h"
#include "model/fused_ops.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "model/backbone.h"
#include "model/layers.h"
#include "model/torch_compat.h"

namespace saccade::model {
namespace {

struct Grads {
  torch::Tensor sum, normed, dx, d_branch, d_gamma, d_beta;
};

// L = sum(w1 * normed) + sum(w2 * sum): both outputs get gradients of their own.
Grads run(const torch::Tensor& x0, const torch::Tensor& branch0, torch::nn::LayerNorm& norm,
          bool fused, bool use_sum = true) {
  norm->zero_grad();
  const torch::Tensor x = x0.clone().requires_grad_(true);
  const torch::Tensor branch = branch0.clone().requires_grad_(true);
  const AddNormOutput out = [&] {
    const FusedScope scope({.add_norm = fused});
    return add_layer_norm(x, branch, norm);
  }();
  const torch::Tensor w1 = torch::linspace(-1, 1, out.normed.numel()).reshape(out.normed.sizes());
  const torch::Tensor w2 = torch::linspace(2, -1, out.sum.numel()).reshape(out.sum.sizes());
  torch::Tensor loss = (out.normed.to(torch::kFloat) * w1).sum();
  if (use_sum) loss = loss + (out.sum.to(torch::kFloat) * w2).sum();
  loss.backward();
  if (fused) {
    EXPECT_NE(out.normed.grad_fn()->name().find("AddLayerNorm"), std::string::npos)
        << "the fused path was not taken: " << out.normed.grad_fn()->name();
  }
  return {out.sum.detach(), out.normed.detach(),         x.grad(),
          branch.grad(),    norm->weight.grad().clone(), norm->bias.grad().clone()};
}

torch::nn::LayerNorm random_norm(int64_t width, torch::ScalarType type) {
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({width}).eps(1e-6));
  torch::NoGradGuard no_grad;
  norm->weight.copy_(torch::rand({width}) + 0.5);
  norm->bias.copy_(torch::randn({width}) * 0.1);
  norm->to(type);
  return norm;
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double rtol, double atol,
                  const char* what) {
  EXPECT_TRUE(torch::allclose(a.to(torch::kFloat), b.to(torch::kFloat), rtol, atol))
      << what << ": largest difference "
      << (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<float>();
}

TEST(AddNorm, FusedIsLibTorchsAddAndLayerNormWithTheirGradients) {
  torch::manual_seed(5);
  for (const bool use_sum : {true, false}) {
    SCOPED_TRACE(use_sum ? "sum used downstream" : "sum unused");
    torch::nn::LayerNorm norm = random_norm(48, torch::kFloat);
    const torch::Tensor x = torch::randn({3, 11, 48}) * 2 + 0.5, branch = torch::randn({3, 11, 48});
    const Grads plain = run(x, branch, norm, false, use_sum);
    const Grads fused = run(x, branch, norm, true, use_sum);
    EXPECT_TRUE(torch::equal(fused.sum, plain.sum));
    expect_close(fused.normed, plain.normed, 1e-5, 1e-5, "normed");
    expect_close(fused.dx, plain.dx, 1e-4, 1e-5, "x's gradient");
    expect_close(fused.d_branch, plain.d_branch, 1e-4, 1e-5, "branch's gradient");
    expect_close(fused.d_gamma, plain.d_gamma, 1e-4, 1e-4, "weight's gradient");
    expect_close(fused.d_beta, plain.d_beta, 1e-4, 1e-4, "bias's gradient");
  }
}

TEST(AddNorm, FusedInBf16IsWithinBf16Rounding) {
  torch::manual_seed(6);
  torch::nn::LayerNorm norm = random_norm(64, torch::kBFloat16);
  const torch::Tensor x = (torch::randn({4, 9, 64}) * 2).to(torch::kBFloat16);
  const torch::Tensor branch = torch::randn({4, 9, 64}).to(torch::kBFloat16);
  const Grads plain = run(x, branch, norm, false);
  const Grads fused = run(x, branch, norm, true);
  EXPECT_TRUE(torch::equal(fused.sum, plain.sum)) << "the bf16 sum is rounded as LibTorch's add";
  expect_close(fused.normed, plain.normed, 1.0 / 64, 1.0 / 64, "normed");
  expect_close(fused.dx, plain.dx, 1.0 / 32, 1.0 / 32, "x's gradient");
  expect_close(fused.d_gamma, plain.d_gamma, 1.0 / 32, 0.1, "weight's gradient");
  expect_close(fused.d_beta, plain.d_beta, 1.0 / 32, 0.1, "bias's gradient");
}

TEST(AddNorm, MixedTypesAndNoBranchTakeLibTorchsOperations) {
  torch::nn::LayerNorm norm = random_norm(16, torch::kFloat);
  const torch::Tensor x = torch::randn({2, 16}).requires_grad_(true);
  const FusedScope scope({.add_norm = true});
  const AddNormOutput mixed = add_layer_norm(x, torch::randn({2, 16}).to(torch::kBFloat16), norm);
  const AddNormOutput alone = add_layer_norm(x, torch::Tensor(), norm);
  EXPECT_EQ(mixed.sum.scalar_type(), torch::kFloat);  // type promotion, as x + branch
  EXPECT_EQ(mixed.normed.grad_fn()->name().find("AddLayerNorm"), std::string::npos)
      << "mixed types went to the fused kernels";
  {
    const AutocastGuard autocast(c10::DeviceType::CPU, true);
    const torch::Tensor xb = x.to(torch::kBFloat16).requires_grad_(true);
    torch::nn::LayerNorm bf16 = random_norm(16, torch::kBFloat16);
    EXPECT_EQ(add_layer_norm(xb, xb, bf16).normed.grad_fn()->name().find("AddLayerNorm"),
              std::string::npos)
        << "under autocast, LibTorch's layer_norm (its own output type)";
  }
  EXPECT_TRUE(torch::equal(alone.sum, x));
  EXPECT_TRUE(torch::equal(alone.normed, norm(x)));
}

// A backbone (every block's adds and LayerNorms through the operation) gives the same
// outputs and parameter gradients fused and not, and unfused exactly those of a block
// written as x + ls1(attn(norm1(x))), then + ls2(mlp(norm2(x))).
TEST(AddNorm, ABackboneTrainsTheSameFused) {
  torch::manual_seed(7);
  BackboneOptions o = BackboneOptions::tiny();
  FovealBackbone backbone(o);
  const int64_t t = 10;
  const torch::Tensor patches = torch::randn({2, t, o.channels, o.patch_size, o.patch_size});
  const torch::Tensor positions = torch::rand({2, t, 3});
  auto pass = [&](bool fused) {
    backbone->zero_grad();
    const StepOutput out = [&] {
      const FusedScope scope({.add_norm = fused});
      return backbone->step(patches, positions, torch::Tensor());
    }();
    (out.patch_tokens.sum() + (out.state * out.state).sum()).backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& p : backbone->named_parameters())
      if (p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
    return std::pair{out.patch_tokens.detach(), grads};
  };
  const auto [plain_out, plain_grads] = pass(false);
  const auto [fused_out, fused_grads] = pass(true);
  expect_close(fused_out, plain_out, 1e-4, 1e-4, "patch tokens");
  ASSERT_EQ(fused_grads.size(), plain_grads.size());
  for (const auto& [name, g] : plain_grads)
    expect_close(fused_grads.at(name), g, 1e-3, 1e-4, name.c_str());
}

TEST(AddNorm, OnlyTheSumUsedPassesItsGradientToBothInputs) {
  torch::nn::LayerNorm norm = random_norm(16, torch::kFloat);
  const torch::Tensor x = torch::randn({3, 16}).requires_grad_(true);
  const torch::Tensor b = torch::randn({3, 16}).requires_grad_(true);
  const torch::Tensor w = torch::randn({3, 16});
  const FusedScope scope({.add_norm = true});
  (add_layer_norm(x, b, norm).sum * w).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), w));
  EXPECT_TRUE(torch::equal(b.grad(), w));
  EXPECT_FALSE(norm->weight.grad().defined() && norm->weight.grad().abs().sum().item<float>() > 0)
      << "the LayerNorm's weight got a gradient its output never sent";
}

TEST(AddNorm, ScopesNestAndEndWhereTheyClose) {
  torch::nn::LayerNorm norm = random_norm(16, torch::kFloat);
  const torch::Tensor x = torch::randn({2, 16}).requires_grad_(true), b = torch::randn({2, 16});
  auto fused = [&] {
    return add_layer_norm(x, b, norm).normed.grad_fn()->name().find("AddLayerNorm") !=
           std::string::npos;
  };
  EXPECT_FALSE(fused()) << "off outside every scope";
  {
    const FusedScope on({.add_norm = true});
    EXPECT_TRUE(fused());
    {
      const FusedScope off({.add_norm = false});
      EXPECT_FALSE(fused());
    }
    EXPECT_TRUE(fused()) << "the inner scope restored the outer one's";
  }
  EXPECT_FALSE(fused());
}

TEST(AddNorm, AnUnfusedBlockIsItsFormulaExactly) {
  torch::manual_seed(8);
  Block block(32, 4, 64, 0.1, 1e-6);
  auto modules = block->named_modules("", /*include_self=*/false);
  auto& norm1 = *modules["norm1"]->as<torch::nn::LayerNorm>();
  auto& norm2 = *modules["norm2"]->as<torch::nn::LayerNorm>();
  auto& attn = *modules["attn"]->as<Attention>();
  auto& mlp = *modules["mlp"]->as<Mlp>();
  auto& ls1 = *modules["ls1"]->as<LayerScale>();
  auto& ls2 = *modules["ls2"]->as<LayerScale>();
  const torch::Tensor x = torch::randn({2, 5, 32});
  set_folded_layerscale(false);
  const torch::Tensor out = block->forward(x);
  set_folded_layerscale(true);
  const torch::Tensor x1 = x + ls1.forward(attn.forward(norm1.forward(x)));
  EXPECT_TRUE(torch::equal(out, x1 + ls2.forward(mlp.forward(norm2.forward(x1)))));
}

}  // namespace
}  // namespace saccade::model
