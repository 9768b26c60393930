#include "model/heads.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace saccade::model {
namespace {

namespace F = torch::nn::functional;

torch::Tensor l2_normalize(const torch::Tensor& x) {
  return F::normalize(x, F::NormalizeFuncOptions().p(2).dim(-1).eps(1e-12));
}

}  // namespace

DinoHeadImpl::DinoHeadImpl(const DinoHeadOptions& options) : options_(options) {
  options_.validate();
  const auto& o = options_;
  mlp_ = register_module(
      "mlp", torch::nn::Sequential(torch::nn::Linear(o.in_dim, o.hidden_dim), torch::nn::GELU(),
                                   torch::nn::Linear(o.hidden_dim, o.hidden_dim), torch::nn::GELU(),
                                   torch::nn::Linear(o.hidden_dim, o.bottleneck_dim)));
  init_vit_weights(*mlp_);
  last_layer_ = register_module("last_layer", std::make_shared<torch::nn::Module>());
  weight_v_ =
      last_layer_->register_parameter("weight_v", torch::empty({o.n_prototypes, o.bottleneck_dim}));
  // PyTorch's nn.Linear init, as DINOv2's head has (weight_norm wraps a default Linear): only
  // the rows' directions matter, but the rows' norm sets how far one AdamW step turns them.
  {
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(o.bottleneck_dim));
    weight_v_.uniform_(-bound, bound);
  }
  weight_g_ = last_layer_->register_parameter("weight_g", torch::ones({o.n_prototypes, 1}),
                                              /*requires_grad=*/o.train_prototype_scale);
}

torch::Tensor DinoHeadImpl::forward(const torch::Tensor& first_state) {
  if (!first_state.defined() || first_state.dim() != 2 || first_state.size(1) != options_.in_dim) {
    throw std::invalid_argument("first_state: expected [B, " + std::to_string(options_.in_dim) +
                                "] (the first state token)");
  }
  auto z = l2_normalize(mlp_->forward(first_state));
  auto weight = weight_g_ * l2_normalize(weight_v_);  // weight norm, per prototype row
  return torch::matmul(z, weight.t());
}

void DinoHeadImpl::set_last_layer_trainable(bool trainable) {
  weight_v_.set_requires_grad(trainable);
  weight_g_.set_requires_grad(trainable && options_.train_prototype_scale);
}

TaskHeadImpl::TaskHeadImpl(const TaskHeadOptions& options) : options_(options) {
  options_.validate();
  const auto& o = options_;
  if (o.kind == TaskHeadOptions::Kind::kTransformer) {
    query_ = register_parameter("query", torch::zeros({1, 1, o.in_dim}));
    state_pos_ = register_parameter("state_pos", torch::zeros({1, o.n_state, o.in_dim}));
    input_mean_ = register_buffer("input_mean", torch::zeros({1, o.n_state, o.in_dim}));
    input_scale_ = register_buffer("input_scale", torch::ones({1, o.n_state, o.in_dim}));
    const auto hidden = static_cast<int64_t>(static_cast<double>(o.in_dim) * o.mlp_ratio + 0.5);
    block_ = register_module("block", Block(o.in_dim, o.heads, hidden, 1.0, 1e-6));
    norm_ = register_module(
        "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.in_dim}).eps(1e-6)));
  }
  linear_ = register_module("linear", torch::nn::Linear(o.in_dim, o.n_classes));
  init_vit_weights(*this);
  if (query_.defined()) {
    trunc_normal_(query_, 0.02);
    trunc_normal_(state_pos_, 0.02);
  }
}

torch::Tensor TaskHeadImpl::forward(const torch::Tensor& state) {
  const auto& o = options_;
  if (!state.defined() || state.dim() != 3 || state.size(2) != o.in_dim ||
      (o.kind == TaskHeadOptions::Kind::kTransformer && state.size(1) != o.n_state)) {
    throw std::invalid_argument("state: expected [B, " + std::to_string(o.n_state) + ", " +
                                std::to_string(o.in_dim) + "]");
  }
  if (o.kind == TaskHeadOptions::Kind::kLinear) return linear(linear_, state.select(1, 0));
  const int64_t b = state.size(0);
  auto x = torch::cat(
      {query_.expand({b, 1, o.in_dim}), (state - input_mean_) / input_scale_ + state_pos_}, 1);
  x = norm_(block_(x));
  return linear(linear_, x.select(1, 0));
}

void TaskHeadImpl::set_input_statistics(const torch::Tensor& mean, const torch::Tensor& scale) {
  const auto& o = options_;
  if (o.kind != TaskHeadOptions::Kind::kTransformer || !mean.defined() || !scale.defined() ||
      mean.numel() != o.n_state * o.in_dim || scale.numel() != o.n_state * o.in_dim)
    throw std::invalid_argument("set_input_statistics: expected a transformer head and [" +
                                std::to_string(o.n_state) + ", " + std::to_string(o.in_dim) +
                                "] mean and scale");
  torch::NoGradGuard no_grad;
  input_mean_.copy_(mean.reshape_as(input_mean_));
  input_scale_.copy_(scale.reshape_as(input_scale_));
}

}  // namespace saccade::model
