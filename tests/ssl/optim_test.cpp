#include "workers/ssl/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace saccade::ssl {
namespace {

// A stand-in with the model's parameter names (docs/model.md): a backbone
// with state embedding, patch embedding, a block with norms and LayerScale,
// and a DINO head with a weight-normalised last layer.
struct Student : torch::nn::Module {
  Student() {
    auto backbone = register_module("backbone", std::make_shared<torch::nn::Module>());
    backbone->register_module("patch_embed", torch::nn::Linear(12, 8));
    backbone->register_parameter("state_embed", torch::randn({4, 8}));
    auto block = std::make_shared<torch::nn::Module>();
    block->register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})));
    block->register_module("mlp", torch::nn::Linear(8, 8));
    auto ls = std::make_shared<torch::nn::Module>();
    ls->register_parameter("gamma", torch::ones({8}));
    block->register_module("ls1", ls);
    auto blocks = std::make_shared<torch::nn::Module>();
    blocks->register_module("0", block);
    backbone->register_module("blocks", blocks);
    auto head = register_module("head", std::make_shared<torch::nn::Module>());
    head->register_module("mlp", torch::nn::Linear(8, 6));
    auto last = std::make_shared<torch::nn::Module>();
    last->register_parameter("weight_v", torch::randn({5, 6}));
    head->register_module("last_layer", last);
  }
};

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(ParameterGroups, NoDecayHoldsBiasesNormsLayerScaleAndEmbeddings) {
  Student student;
  StudentOptimizer opt(named_parameters(student));
  const auto& no_decay = opt.no_decay_names();
  const auto& decay = opt.decay_names();
  for (const char* name :
       {"backbone.patch_embed.bias", "backbone.state_embed", "backbone.blocks.0.norm1.weight",
        "backbone.blocks.0.norm1.bias", "backbone.blocks.0.ls1.gamma", "head.mlp.bias"})
    EXPECT_TRUE(has(no_decay, name)) << name;
  for (const char* name : {"backbone.patch_embed.weight", "backbone.blocks.0.mlp.weight",
                           "head.mlp.weight", "head.last_layer.weight_v"})
    EXPECT_TRUE(has(decay, name)) << name;
  EXPECT_EQ(decay.size() + no_decay.size(), student.parameters().size());
  EXPECT_TRUE(is_last_layer("head.last_layer.weight_v"));
  EXPECT_FALSE(is_last_layer("head.last_layer_norm.weight"));
  EXPECT_TRUE(exempt_from_weight_decay("pos_mlp.fc1.bias", torch::zeros({3})));
  EXPECT_FALSE(exempt_from_weight_decay("pos_mlp.fc1.weight", torch::zeros({3, 3})));

  ScheduleValues v;
  v.lr = 0.01;
  v.last_layer_lr = 0.0;
  v.weight_decay = 0.3;
  opt.apply_schedule(v);
  EXPECT_EQ(opt.group_lr(false, true), 0.01);
  EXPECT_EQ(opt.group_lr(false, false), 0.01);
  EXPECT_EQ(opt.group_lr(true, true), 0.0);
  EXPECT_EQ(opt.group_weight_decay(false, true), 0.3);
  EXPECT_EQ(opt.group_weight_decay(false, false), 0.0);
  EXPECT_EQ(opt.group_weight_decay(true, true), 0.3);
}

// One step on a quadratic loss; returns copies of the parameters after it.
void backward_once(Student& student) {
  at::Tensor loss = torch::zeros({});
  for (const at::Tensor& p : student.parameters()) loss = loss + (p * p).sum();
  loss.backward();
}

TEST(Optimizer, DecayOnlyWhereExpected) {
  // With zero grads (defined) AdamW changes parameters by weight decay only.
  Student student;
  const NamedParameters named = named_parameters(student);
  StudentOptimizer opt(named);
  for (const auto& [name, p] : named) p.mutable_grad() = torch::zeros_like(p);
  ScheduleValues v;
  v.lr = v.last_layer_lr = 0.1;
  v.weight_decay = 0.5;
  opt.apply_schedule(v);
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, p] : named) before[name] = p.detach().clone();
  opt.step();
  for (const auto& [name, p] : named) {
    const bool decays = !exempt_from_weight_decay(name, p);
    if (decays) {
      EXPECT_TRUE(torch::allclose(p, before[name] * (1 - 0.1 * 0.5))) << name;
    } else {
      EXPECT_TRUE(torch::equal(p, before[name])) << name;
    }
  }
}

TEST(Optimizer, FrozenLastLayerGetsNoUpdate) {
  Student student;
  const NamedParameters named = named_parameters(student);
  StudentOptimizer opt(named);
  ScheduleValues v;
  v.lr = v.last_layer_lr = 0.1;
  v.weight_decay = 0.04;
  opt.apply_schedule(v);
  const at::Tensor last_before = student.named_parameters()["head.last_layer.weight_v"].clone();
  const at::Tensor mlp_before = student.named_parameters()["head.mlp.weight"].clone();
  opt.zero_grad();
  backward_once(student);
  EXPECT_EQ(cancel_last_layer_grads(named), 1);
  opt.step();
  EXPECT_TRUE(torch::equal(student.named_parameters()["head.last_layer.weight_v"], last_before));
  EXPECT_FALSE(torch::equal(student.named_parameters()["head.mlp.weight"], mlp_before));
  // Unfrozen: it moves.
  opt.zero_grad();
  backward_once(student);
  opt.step();
  EXPECT_FALSE(torch::equal(student.named_parameters()["head.last_layer.weight_v"], last_before));
}

TEST(Optimizer, ClipGradNormBoundsTheTotalNorm) {
  Student student;
  const NamedParameters named = named_parameters(student);
  for (const auto& [name, p] : named) p.mutable_grad() = torch::full_like(p, 2.0);
  int64_t count = 0;
  for (const auto& [name, p] : named) count += p.numel();
  const double expected = 2.0 * std::sqrt(static_cast<double>(count));
  EXPECT_NEAR(clip_grad_norm(named, 0.0).item<double>(), expected, 1e-3);  // off: measure only
  EXPECT_NEAR(clip_grad_norm(named, 3.0).item<double>(), expected, 1e-3);
  EXPECT_NEAR(clip_grad_norm(named, 0.0).item<double>(), 3.0, 1e-3);
  EXPECT_NEAR(clip_grad_norm(named, 10.0).item<double>(), 3.0, 1e-3);  // below the bound: unchanged
  EXPECT_NEAR(clip_grad_norm(named, 0.0).item<double>(), 3.0, 1e-3);
}

// The step clips without reading the norm back (the host does not wait for the device);
// the grads must still come out as libtorch's clip_grad_norm_ leaves them.
TEST(Optimizer, ClipGradNormScalesTheGradsAsLibtorchDoes) {
  torch::manual_seed(11);
  auto grads_like = [] {
    NamedParameters named;
    for (const int64_t n : {7, 64, 3, 129}) {
      torch::Tensor p = torch::zeros({n}, torch::requires_grad());
      p.mutable_grad() = torch::randn({n});
      named.emplace_back("p" + std::to_string(n), p);
    }
    return named;
  };
  for (const bool multi_tensor : {false, true}) {
    torch::manual_seed(11);
    const NamedParameters ours = grads_like();
    torch::manual_seed(11);
    const NamedParameters theirs = grads_like();
    std::vector<torch::Tensor> their_params;
    for (const auto& [name, p] : theirs) their_params.push_back(p);
    const double their_norm = torch::nn::utils::clip_grad_norm_(their_params, 0.5);
    const torch::Tensor our_norm = clip_grad_norm(ours, 0.5, multi_tensor);
    EXPECT_EQ(our_norm.dim(), 0);
    EXPECT_NEAR(our_norm.item<double>(), their_norm, 1e-6 * their_norm) << multi_tensor;
    EXPECT_GT(their_norm, 1.0);  // so the clip scaled every grad
    for (size_t i = 0; i < ours.size(); ++i) {
      if (multi_tensor)
        EXPECT_TRUE(torch::allclose(ours[i].second.grad(), theirs[i].second.grad(), 1e-6, 0));
      else
        EXPECT_TRUE(torch::equal(ours[i].second.grad(), theirs[i].second.grad())) << i;
    }
  }
}

TEST(Optimizer, SaveLoadContinuesBitExactly) {
  torch::manual_seed(5);
  Student a;
  ScheduleValues v;
  v.lr = v.last_layer_lr = 0.05;
  v.weight_decay = 0.1;
  StudentOptimizer opt_a(named_parameters(a));
  opt_a.apply_schedule(v);
  for (int i = 0; i < 3; ++i) {
    opt_a.zero_grad();
    backward_once(a);
    opt_a.step();
  }
  const std::string state = opt_a.save();
  Student b;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : a.named_parameters())
      b.named_parameters()[item.key()].copy_(item.value());
  }
  StudentOptimizer opt_b(named_parameters(b));
  opt_b.load(state);
  opt_b.apply_schedule(v);  // lr / wd are pure functions of the step, not restored state
  for (auto* pair : {&a, &b}) {
    StudentOptimizer& opt = pair == &a ? opt_a : opt_b;
    opt.zero_grad();
    backward_once(*pair);
    opt.step();
  }
  for (const auto& item : a.named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), b.named_parameters()[item.key()])) << item.key();
  EXPECT_THROW(opt_b.load("not an archive"), std::runtime_error);
}

// The multi-tensor update is libtorch's AdamW, bit for bit: same parameters after steps
// with weight decay, a frozen last layer (no grad, so its step count falls behind and it
// forms its own foreach group) and a save/load across the two paths.
TEST(Optimizer, MultiTensorUpdateIsLibtorchsAdamWBitExactly) {
  torch::manual_seed(7);
  Student reference, fast;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : reference.named_parameters())
      fast.named_parameters()[item.key()].copy_(item.value());
  }
  AdamWSettings loop_settings, foreach_settings;
  loop_settings.multi_tensor = false;
  foreach_settings.multi_tensor = true;
  const NamedParameters ref_named = named_parameters(reference),
                        fast_named = named_parameters(fast);
  StudentOptimizer ref_opt(ref_named, loop_settings), fast_opt(fast_named, foreach_settings);
  ScheduleValues v;
  v.lr = 0.05;
  v.last_layer_lr = 0.02;
  v.weight_decay = 0.1;
  for (int i = 0; i < 4; ++i) {
    for (auto* opt : {&ref_opt, &fast_opt}) {
      Student& model = opt == &ref_opt ? reference : fast;
      const NamedParameters& named = opt == &ref_opt ? ref_named : fast_named;
      opt->zero_grad();
      backward_once(model);
      if (i < 2) cancel_last_layer_grads(named);  // frozen for the first two steps
      opt->apply_schedule(v);
      opt->step();
    }
  }
  for (const auto& item : reference.named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), fast.named_parameters()[item.key()])) << item.key();
  // State written by one path continues bit-exactly in the other.
  StudentOptimizer resumed(fast_named, foreach_settings);
  resumed.load(ref_opt.save());
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : reference.named_parameters())
      fast.named_parameters()[item.key()].copy_(item.value());
  }
  for (auto* opt : {&ref_opt, &resumed}) {
    Student& model = opt == &ref_opt ? reference : fast;
    opt->zero_grad();
    backward_once(model);
    opt->apply_schedule(v);
    opt->step();
  }
  for (const auto& item : reference.named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), fast.named_parameters()[item.key()])) << item.key();
}

TEST(Ema, MultiTensorUpdateEqualsThePerParameterOne) {
  torch::manual_seed(8);
  Student a, b, student;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : a.named_parameters())
      b.named_parameters()[item.key()].copy_(item.value());
  }
  const NamedParameters ta = named_parameters(a), tb = named_parameters(b),
                        s = named_parameters(student);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : ta) before.push_back(p.detach().clone());
  ema_update(ta, s, 0.9, /*multi_tensor=*/false);
  ema_update(tb, s, 0.9, /*multi_tensor=*/true);
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second)) << ta[i].first;
    EXPECT_TRUE(torch::allclose(tb[i].second, 0.9 * before[i] + 0.1 * s[i].second)) << ta[i].first;
  }
}

TEST(Ema, MomentumZeroCopiesOneKeeps) {
  torch::manual_seed(6);
  Student teacher, student;
  const NamedParameters t = named_parameters(teacher), s = named_parameters(student);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : t) before.push_back(p.detach().clone());
  ema_update(t, s, 1.0);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(torch::equal(t[i].second, before[i]));
  ema_update(t, s, 0.75);
  for (size_t i = 0; i < t.size(); ++i)
    EXPECT_TRUE(torch::allclose(t[i].second, 0.75 * before[i] + 0.25 * s[i].second));
  ema_update(t, s, 0.0);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(torch::equal(t[i].second, s[i].second));
  EXPECT_FALSE(t[0].second.grad().defined());
}

TEST(Ema, MismatchesAreClearErrors) {
  Student teacher, student;
  NamedParameters t = named_parameters(teacher), s = named_parameters(student);
  EXPECT_THROW(ema_update(t, s, 1.5), std::invalid_argument);
  NamedParameters shorter(s.begin(), s.end() - 1);
  EXPECT_THROW(ema_update(t, shorter, 0.9), std::invalid_argument);
  NamedParameters renamed = s;
  renamed[0].first = "other";
  EXPECT_THROW(ema_update(t, renamed, 0.9), std::invalid_argument);
  NamedParameters reshaped = s;
  reshaped[0].second = torch::zeros({1});
  EXPECT_THROW(ema_update(t, reshaped, 0.9), std::invalid_argument);
}

}  // namespace
}  // namespace saccade::ssl
