// The foveal backbone: shapes in ViT and foveal modes, the ViT-S parameter
// count, no backprop through time, and image-size independence.
#include "model/backbone.h"

#include <cmath>

#include <gtest/gtest.h>

#include <cstdio>
#include <utility>

#include "model/flops.h"

namespace saccade::model {
namespace {

BackboneOptions small_tiny() {
  auto o = BackboneOptions::tiny();
  o.depth = 2;  // keep the suite fast; the preset itself is exercised in ShapesInEveryMode
  return o;
}

// Positions of a G x G foveal grid (paper appendix "Foveal Grid Formulation")
// for an image of width x height pixels, in short-side units.
torch::Tensor grid_positions(int64_t g, double cx_px, double cy_px, double z, double width_px,
                             double height_px) {
  const double unit = std::min(width_px, height_px);
  const double side = std::pow(2.0, -z);  // in short-side units
  auto pos = torch::empty({g * g, 3});
  for (int64_t v = 0; v < g; ++v)
    for (int64_t u = 0; u < g; ++u) {
      const double x = cx_px / unit + (static_cast<double>(u) - (g - 1) / 2.0) * side;
      const double y = cy_px / unit + (static_cast<double>(v) - (g - 1) / 2.0) * side;
      pos[v * g + u][0] = x;
      pos[v * g + u][1] = y;
      pos[v * g + u][2] = z;
    }
  return pos;
}

TEST(Backbone, ShapesInEveryMode) {
  torch::manual_seed(0);
  const auto o = BackboneOptions::tiny();
  FovealBackbone model(o);
  const int64_t b = 2;
  // ViT mode: one step over a 16 x 16 global grid at z = log2(16).
  auto vit = model->step(torch::randn({b, 256, 3, 16, 16}),
                         grid_positions(16, 128, 128, 4.0, 256, 256).expand({b, 256, 3}));
  EXPECT_EQ(vit.state.sizes(), (std::vector<int64_t>{b, o.n_state, o.width}));
  EXPECT_EQ(vit.patch_tokens.sizes(), (std::vector<int64_t>{b, 256, o.width}));
  EXPECT_EQ(vit.first_state_normalized().sizes(), (std::vector<int64_t>{b, o.width}));
  EXPECT_TRUE(torch::allclose(vit.first_state_normalized().norm(2, -1), torch::ones({b})));
  // Foveal mode: K steps of (6 multi-zoom + 5 x 5 grid) patches, the state carried.
  torch::Tensor state;
  for (int k = 0; k < 3; ++k) {
    auto out = model->step(torch::randn({b, 31, 3, 16, 16}), torch::rand({b, 31, 3}), state);
    EXPECT_EQ(out.state.sizes(), (std::vector<int64_t>{b, o.n_state, o.width}));
    EXPECT_EQ(out.patch_tokens.sizes(), (std::vector<int64_t>{b, 31, o.width}));
    if (state.defined()) {
      EXPECT_FALSE(torch::equal(out.state, state));
    }
    state = out.state;
  }
  // Greyscale, another patch size.
  auto grey_o = small_tiny();
  grey_o.channels = 1;
  grey_o.patch_size = 8;
  FovealBackbone grey(grey_o);
  EXPECT_EQ(grey->step(torch::randn({3, 5, 1, 8, 8}), torch::rand({3, 5, 3})).state.sizes(),
            (std::vector<int64_t>{3, grey_o.n_state, grey_o.width}));
}

TEST(Backbone, BadInputsAreRefusedByName) {
  FovealBackbone model(small_tiny());
  EXPECT_THROW(model->step(torch::randn({2, 4, 1, 16, 16}), torch::rand({2, 4, 3})),
               std::invalid_argument);  // wrong channels
  EXPECT_THROW(model->step(torch::randn({2, 4, 3, 16, 16}), torch::rand({2, 5, 3})),
               std::invalid_argument);  // positions do not match
  EXPECT_THROW(model->step(torch::randn({2, 4, 3, 16, 16}), torch::rand({2, 4, 3}),
                           torch::zeros({2, 7, 192})),
               std::invalid_argument);  // state with the wrong token count
  try {
    model->step(torch::randn({2, 4, 3, 16, 16}), torch::rand({2, 4, 2}));
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("positions"), std::string::npos) << e.what();
  }
  auto bad = BackboneOptions::tiny();
  bad.heads = 5;  // 192 % 5 != 0
  try {
    FovealBackbone m(bad);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.heads"), std::string::npos) << e.what();
  }
}

TEST(Backbone, VitSParameterCountMatchesAStandardVitS16) {
  // Standard ViT-S/16 backbone (timm vit_small_patch16_224 without its head):
  //   patch embed conv 3*16*16*384 + 384       =    295,296
  //   cls token 384, position table 197*384    =     76,032
  //   12 blocks * (2 LayerNorms 4*384 + qkv 384*1152+1152 + proj 384*384+384
  //               + fc1 384*1536+1536 + fc2 1536*384+384) = 12 * 1,774,464 = 21,293,568
  //   final norm 2*384                         =        768
  //   total                                    = 21,665,664
  const int64_t standard = 295296 + 76032 + 21293568 + 768;
  ASSERT_EQ(standard, 21665664);
  // Ours replaces cls token + table by 8 state tokens and the (x, y, z) MLP, and adds
  // DINOv2's LayerScale (2 * 384 per block).
  const auto o = BackboneOptions::vit_s();
  const int64_t w = o.width, h = o.pos_mlp_hidden;
  const int64_t ours =
      295296 + o.n_state * w + (3 * h + h) + (h * w + w) + 12 * (1774464 + 2 * w) + 2 * w;
  FovealBackbone model(o);
  int64_t counted = 0;
  for (const auto& p : model->parameters()) counted += p.numel();
  EXPECT_EQ(counted, ours);
  EXPECT_LT(std::abs(static_cast<double>(counted - standard)) / standard, 0.02)
      << counted << " vs " << standard;
}

TEST(Backbone, NoBackpropThroughTime) {
  torch::manual_seed(1);
  FovealBackbone model(small_tiny());
  auto p1 = torch::randn({2, 6, 3, 16, 16}), x1 = torch::rand({2, 6, 3});
  auto p2 = torch::randn({2, 6, 3, 16, 16}), x2 = torch::rand({2, 6, 3});
  auto s1 = model->step(p1, x1).state;
  ASSERT_TRUE(s1.requires_grad());
  s1.retain_grad();
  auto loss = model->step(p2, x2, s1).state.pow(2).sum();
  loss.backward();
  EXPECT_FALSE(s1.grad().defined()) << "gradient leaked into the state of step k-1";
  // Every parameter gets a gradient, identical to the one with an explicitly detached state.
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    grads.push_back(p.grad().clone());
  }
  EXPECT_GT(model->named_parameters()["state_embed"].grad().abs().sum().item<double>(), 0.0);
  model->zero_grad();
  model->step(p2, x2, s1.detach()).state.pow(2).sum().backward();
  size_t i = 0;
  for (const auto& p : model->parameters()) EXPECT_TRUE(torch::allclose(p.grad(), grads[i++]));
}

// How much a step's new state depends on its own glimpse (two glimpses at the same
// positions), relative to the state's size: for the first step, and for a second step
// carrying the first's state.
std::pair<double, double> step_sensitivity(BackboneOptions::StateInput state_input) {
  torch::manual_seed(3);
  auto o = small_tiny();
  o.layerscale_init = 1.0;  // the tiny preset's (configs/tiny.toml)
  o.state_input = state_input;
  FovealBackbone model(o);
  torch::NoGradGuard no_grad;
  auto p1 = torch::randn({16, 6, 3, 16, 16}), x1 = torch::rand({16, 6, 3});
  auto p2 = torch::randn({16, 6, 3, 16, 16}), p3 = torch::randn({16, 6, 3, 16, 16});
  auto x2 = torch::rand({16, 6, 3});
  const auto s1 = model->step(p1, x1).state, s1b = model->step(p3, x1).state;
  const auto a = model->step(p2, x2, s1).state, b = model->step(p3, x2, s1).state;
  return {((s1 - s1b).norm() / s1.norm()).item<double>(),
          ((a - b).norm() / a.norm()).item<double>()};
}

// The state carried into step 2 must not drown what step 2 sees: with the state as the
// previous final-LayerNorm output (unit variance per feature), a fresh step's updates
// are small beside it and every later glimpse leaves the state almost as the first wrote
// it (measured: k-NN flat over glimpses 1..4). state_proj brings it to the patch
// tokens' scale; memory tokens leave the state tokens fresh.
TEST(Backbone, ALaterGlimpseChangesTheCarriedState) {
  using StateInput = BackboneOptions::StateInput;
  const auto [first, projected] = step_sensitivity(StateInput::kProjected);
  const double normed = step_sensitivity(StateInput::kNormed).second;
  const double memory = step_sensitivity(StateInput::kMemory).second;
  const double gated = step_sensitivity(StateInput::kGated).second;
  std::printf(
      "sensitivity to its glimpse: step 1 %.3f; step 2 projected %.3f, normed %.3f, memory "
      "%.3f, gated %.3f\n",
      first, projected, normed, memory, gated);
  EXPECT_GT(projected, 3 * normed);
  EXPECT_GT(projected, 0.5 * first);
  EXPECT_GT(memory, 3 * normed);
  EXPECT_GT(memory, 0.5 * first);
  EXPECT_GT(gated, 3 * normed);  // the initial gate takes 0.88 of the new state
  EXPECT_GT(gated, 0.5 * first);
}

// Memory tokens: a later step reads the carried state (its output depends on it), as
// n_state tokens more, and still returns n_state state tokens and T patch tokens.
TEST(Backbone, MemoryTokensCarryTheStateIntoTheNextStep) {
  torch::manual_seed(4);
  auto o = small_tiny();
  o.layerscale_init = 1.0;
  o.state_input = BackboneOptions::StateInput::kMemory;
  FovealBackbone model(o);
  torch::NoGradGuard no_grad;
  auto p = torch::randn({4, 6, 3, 16, 16}), x = torch::rand({4, 6, 3});
  const auto s1 = model->step(p, x).state, s1b = model->step(torch::randn_like(p), x).state;
  const auto a = model->step(p, x, s1), b = model->step(p, x, s1b), fresh = model->step(p, x);
  EXPECT_EQ(a.state.sizes(), s1.sizes());
  EXPECT_EQ(a.patch_tokens.size(1), 6);
  EXPECT_FALSE(torch::allclose(a.state, b.state, 1e-4, 1e-4)) << "the carried state is not read";
  EXPECT_FALSE(torch::allclose(a.state, fresh.state, 1e-4, 1e-4));
  // Step 1 has no memory tokens: it is the same computation as without a state.
  EXPECT_TRUE(torch::allclose(s1, model->step(p, x, torch::Tensor()).state));
  // The FLOP count knows the extra tokens of a carrying step.
  EXPECT_EQ(step_flops(o, 6, true).tokens, 2 * o.n_state + 6);
  EXPECT_EQ(step_flops(o, 6).tokens, o.n_state + 6);
}

// The gated state: a closed gate keeps the carried state exactly (what an earlier glimpse
// saw survives a glimpse that adds nothing), an open one is the memory-token step, and the
// gate learns from the current step's loss alone.
TEST(Backbone, GatedStateKeepsOrReplacesTheCarriedStateAsItsGateSays) {
  using StateInput = BackboneOptions::StateInput;
  torch::manual_seed(6);
  auto o = small_tiny();
  o.layerscale_init = 1.0;
  o.state_input = StateInput::kGated;
  FovealBackbone gated(o);
  o.state_input = StateInput::kMemory;
  FovealBackbone memory(o);
  {  // the memory model gets the gated one's weights (every name it has)
    torch::NoGradGuard no_grad;
    const auto from = gated->named_parameters();
    for (auto& p : memory->named_parameters()) p.value().copy_(from[p.key()]);
  }
  auto p = torch::randn({4, 6, 3, 16, 16}), x = torch::rand({4, 6, 3});
  auto p2 = torch::randn({4, 6, 3, 16, 16}), x2 = torch::rand({4, 6, 3});
  const auto s1 = gated->step(p, x).state.detach();
  // Step 1 has nothing to mix: the memory model's step 1.
  EXPECT_TRUE(torch::allclose(s1, memory->step(p, x).state, 1e-5, 1e-5));
  auto bias = gated->named_parameters()["state_gate.bias"];  // shares the parameter
  {
    torch::NoGradGuard no_grad;
    bias.fill_(-40.0);  // closed
  }
  EXPECT_TRUE(torch::allclose(gated->step(p2, x2, s1).state, s1, 0, 1e-6));
  {
    torch::NoGradGuard no_grad;
    bias.fill_(40.0);  // open
  }
  const auto open = gated->step(p2, x2, s1).state;
  EXPECT_TRUE(torch::allclose(open, memory->step(p2, x2, s1).state, 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(open, s1, 1e-3, 1e-3));
  {
    torch::NoGradGuard no_grad;
    bias.fill_(BackboneOptions::kGateBiasInit);
  }
  // The gate's weights get a gradient from step 2's output; step 1 never touches them.
  gated->zero_grad();
  gated->step(p, x).state.pow(2).sum().backward();
  const auto gate_w = gated->named_parameters()["state_gate.weight"];
  EXPECT_FALSE(gate_w.grad().defined() && gate_w.grad().abs().sum().item<float>() > 0);
  gated->zero_grad();
  gated->step(p2, x2, s1).state.pow(2).sum().backward();
  ASSERT_TRUE(gate_w.grad().defined());
  EXPECT_GT(gate_w.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(parse_state_input("gated"), StateInput::kGated);
  EXPECT_STREQ(state_input_name(StateInput::kGated), "gated");
  // FLOPs: the memory tokens, plus the gate's 2w -> w per state token.
  o.state_input = StateInput::kGated;
  const auto f = step_flops(o, 6, true), m = step_flops(memory->options(), 6, true);
  EXPECT_EQ(f.tokens, 2 * o.n_state + 6);
  EXPECT_EQ(f.embed - m.embed, 2 * o.n_state * 2 * o.width * o.width);
}

TEST(Backbone, OutputDoesNotDependOnTheSourceImageSize) {
  torch::manual_seed(2);
  auto o = small_tiny();
  o.layerscale_init = 1.0;  // at 1e-5 the fresh blocks barely move the state tokens
  FovealBackbone model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  // The same 5 x 5 grid at the same relative place in a 256 x 384 and a 4096 x 6144
  // image: positions computed from pixels come out equal in short-side units.
  auto small = grid_positions(5, 100, 200, 3.0, 384, 256);
  auto large = grid_positions(5, 1600, 3200, 3.0, 6144, 4096);
  ASSERT_TRUE(torch::allclose(small, large, 0, 1e-6));
  auto patches = torch::randn({1, 25, 3, 16, 16});
  auto a = model->step(patches, small.unsqueeze(0)), b = model->step(patches, large.unsqueeze(0));
  EXPECT_TRUE(torch::allclose(a.state, b.state, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(a.patch_tokens, b.patch_tokens, 1e-5, 1e-5));
  // The positions do matter: moving the grid changes the output.
  auto moved = model->step(patches, grid_positions(5, 150, 200, 3.0, 384, 256).unsqueeze(0));
  EXPECT_FALSE(torch::allclose(a.state, moved.state, 1e-4, 1e-4));
  // So does the zoom (multi-zoom patches at one centre must differ).
  auto zoomed = model->step(patches, grid_positions(5, 100, 200, 2.0, 384, 256).unsqueeze(0));
  EXPECT_FALSE(torch::allclose(a.state, zoomed.state, 1e-4, 1e-4));
}

TEST(Backbone, FlopsGrowWithTokensNotImageSize) {
  const auto o = BackboneOptions::vit_s();
  const auto vit = step_flops(o, 256), fovea = step_flops(o, 31);
  EXPECT_EQ(vit.tokens, 264);
  // Per block and token: 24 w^2 (qkv 6, proj 2, MLP 16) + 4 n w (QK^T, AV), in 2 x MAC.
  EXPECT_NEAR(static_cast<double>(vit.attention + vit.mlp),
              264.0 * 12 * (24.0 * 384 * 384 + 4.0 * 264 * 384), 1.0);
  EXPECT_GT(vit.forward(), 7 * fovea.forward());
  EXPECT_EQ(vit.forward_backward(), 3 * vit.forward());
}

}  // namespace
}  // namespace saccade::model
