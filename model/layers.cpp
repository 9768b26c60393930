#include "model/layers.h"

#include <atomic>
#include <vector>

#include "model/add_norm.h"
#include "model/fused_linear.h"
#include "model/torch_compat.h"

namespace saccade::model {
namespace {
std::atomic<bool> g_folded_layerscale{true};

// ReuseFoldedLayerScale's state, per thread: whether reuse is on, the current scope's number
// (a new one for every scope that turns it on), and the layers that kept folded weights.
thread_local bool g_reuse_folded = false;
thread_local std::uint64_t g_reuse_scope = 0;
thread_local int g_reuse_depth = 0;
thread_local std::vector<LayerScaleImpl*> g_kept_folded;
}  // namespace

ReuseFoldedLayerScale::ReuseFoldedLayerScale(bool on) : previous_(g_reuse_folded) {
  ++g_reuse_depth;
  if (on && !g_reuse_folded) ++g_reuse_scope;
  g_reuse_folded = on;
}

ReuseFoldedLayerScale::~ReuseFoldedLayerScale() {
  g_reuse_folded = previous_;
  if (--g_reuse_depth > 0) return;
  ++g_reuse_scope;
  for (LayerScaleImpl* layer : g_kept_folded) layer->forget_folded();
  g_kept_folded.clear();
}

void set_folded_layerscale(bool enabled) {
  g_folded_layerscale = enabled;
}

bool folded_layerscale() {
  return g_folded_layerscale;
}

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return linear_fused(x, layer->weight, layer->bias);
}

void trunc_normal_(torch::Tensor tensor, double std) {
  torch::NoGradGuard no_grad;
  // Resample the tail: exact truncated normal, cheap since ~5% falls outside.
  auto values = torch::randn(tensor.sizes(), tensor.options()) * std;
  for (int i = 0; i < 32; ++i) {
    auto outside = values.abs() > 2 * std;
    if (!outside.any().item<bool>()) break;
    values = torch::where(outside, torch::randn(tensor.sizes(), tensor.options()) * std, values);
  }
  tensor.copy_(values.clamp(-2 * std, 2 * std));
}

void init_vit_weights(torch::nn::Module& module, double std) {
  torch::NoGradGuard no_grad;
  auto init = [std](torch::nn::Module& m) {
    if (auto* linear = m.as<torch::nn::Linear>()) {
      trunc_normal_(linear->weight, std);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* norm = m.as<torch::nn::LayerNorm>()) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  };
  // modules(include_self = true) needs shared_from_this, unavailable in constructors.
  init(module);
  for (auto& child : module.modules(/*include_self=*/false)) init(*child);
}

MlpImpl::MlpImpl(int64_t in_dim, int64_t hidden_dim, int64_t out_dim, Gelu gelu)
    : fc1_(register_module("fc1", torch::nn::Linear(in_dim, hidden_dim))),
      fc2_(register_module("fc2", torch::nn::Linear(hidden_dim, out_dim))),
      gelu_(gelu) {}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return forward_with_fc2(x, {fc2_->weight, fc2_->bias});
}

torch::Tensor MlpImpl::forward_with_fc2(const torch::Tensor& x, const LinearWeights& fc2) {
  return mlp_gelu(x, fc1_->weight, fc1_->bias, fc2.weight, fc2.bias, gelu_);
}

AttentionImpl::AttentionImpl(int64_t width, int64_t heads)
    : heads_(heads),
      qkv_(register_module("qkv", torch::nn::Linear(width, 3 * width))),
      proj_(register_module("proj", torch::nn::Linear(width, width))) {}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  return linear(proj_, mix(x));
}

torch::Tensor AttentionImpl::mix(const torch::Tensor& x) {
  const int64_t b = x.size(0), n = x.size(1), w = x.size(2);
  // [B, N, 3, heads, head_dim] (timm's layout) -> q, k, v [B, heads, N, head_dim], views.
  // unbind at dim 2, not three selects: a select's backward writes a zero tensor of all of
  // qkv and the three are then summed; unbind's backward stacks the three gradients in one
  // write, straight into qkv's layout, so that its reshape back is a view (the same values).
  const std::vector<torch::Tensor> qkv =
      linear(qkv_, x).reshape({b, n, 3, heads_, w / heads_}).unbind(2);
  auto out = attention(qkv[0].transpose(1, 2), qkv[1].transpose(1, 2),
                       qkv[2].transpose(1, 2));  // torch_compat.h
  return out.transpose(1, 2).reshape({b, n, w});
}

LayerScaleImpl::LayerScaleImpl(int64_t width, double init_value)
    : gamma_(register_parameter("gamma", torch::full({width}, init_value))) {}

torch::Tensor LayerScaleImpl::of_linear(const torch::nn::Linear& linear, const torch::Tensor& x) {
  if (!folded_layerscale()) return forward(linear_fused(x, linear->weight, linear->bias));
  const LinearWeights w = folded(linear);
  return linear_fused(x, w.weight, w.bias);
}

LinearWeights LayerScaleImpl::folded(const torch::nn::Linear& linear) {
  const torch::Tensor& weight = linear->weight;
  const torch::Tensor& bias = linear->bias;
  auto fold = [&]() -> LinearWeights {
    return {weight * gamma_.unsqueeze(1), bias.defined() ? bias * gamma_ : bias};
  };
  if (!g_reuse_folded) return fold();
  Folded& kept = folded_[torch::GradMode::is_enabled() ? 1 : 0];
  if (kept.scope != g_reuse_scope || !kept.weights.weight.defined()) {
    kept = {g_reuse_scope, fold()};
    g_kept_folded.push_back(this);
  }
  return kept.weights;
}

void LayerScaleImpl::forget_folded() {
  folded_ = {};
}

BlockImpl::BlockImpl(int64_t width, int64_t heads, int64_t mlp_hidden, double layerscale_init,
                     double norm_eps, BackboneOptions::Gelu gelu)
    : norm1_(register_module(
          "norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(norm_eps)))),
      norm2_(register_module(
          "norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(norm_eps)))),
      attn_(register_module("attn", Attention(width, heads))),
      ls1_(register_module("ls1", LayerScale(width, layerscale_init))),
      ls2_(register_module("ls2", LayerScale(width, layerscale_init))),
      mlp_(register_module("mlp", Mlp(width, mlp_hidden, width, gelu))) {}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  const Residual out = forward_residual({std::move(x), {}});
  return out.x + out.pending;
}

Residual BlockImpl::forward_residual(const Residual& in) {
  const AddNormOutput first = add_layer_norm(in.x, in.pending, norm1_);
  const AddNormOutput second =
      add_layer_norm(first.sum, ls1_->of_linear(attn_->proj(), attn_->mix(first.normed)), norm2_);
  torch::Tensor mlp_branch = folded_layerscale()
                                 ? mlp_->forward_with_fc2(second.normed, ls2_->folded(mlp_->fc2()))
                                 : ls2_(mlp_(second.normed));
  return {second.sum, std::move(mlp_branch)};
}

}  // namespace saccade::model
