#include "model/policy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace saccade::model {
namespace {

constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)

void check_extent(const torch::Tensor& extent, int64_t batch) {
  if (!extent.defined() || extent.dim() != 2 || extent.size(0) != batch || extent.size(1) != 2) {
    throw std::invalid_argument("extent: expected [" + std::to_string(batch) +
                                ", 2] = (W / min(W, H), H / min(W, H))");
  }
  if ((extent < 1.0 - 1e-6).any().item<bool>()) {
    throw std::invalid_argument("extent: expected both entries >= 1 (short side = 1)");
  }
}

}  // namespace

GaussianMixture::GaussianMixture(torch::Tensor means, torch::Tensor logits, double std,
                                 torch::Tensor extent)
    : means_(std::move(means)), logits_(std::move(logits)), extent_(std::move(extent)), std_(std) {
  if (!means_.defined() || means_.dim() != 3 || means_.size(2) != 2) {
    throw std::invalid_argument("means: expected [B, M, 2]");
  }
  if (!logits_.defined() || logits_.dim() != 2 || logits_.size(0) != means_.size(0) ||
      logits_.size(1) != means_.size(1)) {
    throw std::invalid_argument("logits: expected [B, M] matching means");
  }
  if (!(std > 0) || !std::isfinite(std)) throw std::invalid_argument("std: expected > 0");
  check_extent(extent_, means_.size(0));
}

torch::Tensor GaussianMixture::sample(c10::optional<torch::Generator> generator) const {
  torch::NoGradGuard no_grad;
  const int64_t b = means_.size(0);
  auto probs = torch::softmax(logits_.detach().to(torch::kFloat), -1);
  auto component = torch::multinomial(probs, 1, /*replacement=*/true, generator);  // [B, 1]
  auto mean = means_.detach().gather(1, component.unsqueeze(-1).expand({b, 1, 2})).squeeze(1);
  auto noise = at::normal(0.0, std_, {b, 2}, generator, mean.options());
  auto x = mean + noise;
  return torch::minimum(torch::maximum(x, torch::zeros_like(x)), extent_.to(x.options()));
}

torch::Tensor GaussianMixture::sample_from_uniforms(const torch::Tensor& uniforms) const {
  const int64_t b = means_.size(0), m = means_.size(1);
  if (!uniforms.defined() || uniforms.dim() != 2 || uniforms.size(0) != b ||
      uniforms.size(1) != 3) {
    throw std::invalid_argument("uniforms: expected [" + std::to_string(b) + ", 3]");
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor u = uniforms.to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor probs = torch::softmax(logits_.detach().to(torch::kCPU, torch::kFloat64), -1);
  const torch::Tensor means = means_.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor extent = extent_.to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor out = torch::empty({b, 2}, torch::kFloat64);
  auto ua = u.accessor<double, 2>();
  auto pa = probs.accessor<double, 2>();
  auto ma = means.accessor<double, 3>();
  auto ea = extent.accessor<double, 2>();
  auto oa = out.accessor<double, 2>();
  for (int64_t i = 0; i < b; ++i) {
    int64_t k = 0;
    for (double cdf = pa[i][0]; k + 1 < m && ua[i][0] >= cdf; cdf += pa[i][++k]) {
    }
    const double radius = std::sqrt(-2.0 * std::log(1.0 - ua[i][1]));  // 1 - u > 0
    const double angle = 2.0 * M_PI * ua[i][2];
    const double x = ma[i][k][0] + std_ * radius * std::cos(angle);
    const double y = ma[i][k][1] + std_ * radius * std::sin(angle);
    oa[i][0] = std::clamp(x, 0.0, ea[i][0]);
    oa[i][1] = std::clamp(y, 0.0, ea[i][1]);
  }
  return out.to(torch::kFloat32);
}

torch::Tensor GaussianMixture::log_prob(const torch::Tensor& x) const {
  if (!x.defined() || x.dim() != 2 || x.size(0) != means_.size(0) || x.size(1) != 2) {
    throw std::invalid_argument("x: expected [B, 2] matching the mixture's batch");
  }
  auto diff = x.unsqueeze(1) - means_;  // [B, M, 2]
  auto log_normal = -0.5 * (diff * diff).sum(-1) / (std_ * std_) - 2.0 * std::log(std_) - kLog2Pi;
  return torch::logsumexp(torch::log_softmax(logits_, -1) + log_normal, -1);
}

torch::Tensor GaussianMixture::weight_entropy() const {
  auto log_pi = torch::log_softmax(logits_, -1);
  return -(log_pi.exp() * log_pi).sum(-1);
}

torch::Tensor GaussianMixture::entropy_upper_bound() const {
  // Entropy of a 2-D isotropic Gaussian: log(2 pi e std^2).
  return weight_entropy() + (kLog2Pi + 1.0 + 2.0 * std::log(std_));
}

torch::Tensor GaussianMixture::entropy_monte_carlo(
    int64_t n_samples, c10::optional<torch::Generator> generator) const {
  if (n_samples <= 0) throw std::invalid_argument("n_samples: expected > 0");
  torch::NoGradGuard no_grad;
  // Unclamped draws: the estimate is of the mixture log_prob() describes.
  const int64_t b = means_.size(0);
  auto probs = torch::softmax(logits_.to(torch::kFloat), -1);
  auto component = torch::multinomial(probs, n_samples, true, generator);  // [B, n]
  auto mean = means_.gather(1, component.unsqueeze(-1).expand({b, n_samples, 2}));
  auto x = mean + at::normal(0.0, std_, {b, n_samples, 2}, generator, mean.options());
  auto diff = x.unsqueeze(2) - means_.unsqueeze(1);  // [B, n, M, 2]
  auto log_normal = -0.5 * (diff * diff).sum(-1) / (std_ * std_) - 2.0 * std::log(std_) - kLog2Pi;
  auto lp = torch::logsumexp(torch::log_softmax(logits_, -1).unsqueeze(1) + log_normal, -1);
  return -lp.mean(1);
}

GazePolicyImpl::GazePolicyImpl(const PolicyOptions& options) : options_(options) {
  options_.validate();
  const auto& o = options_;
  in_proj_ = register_module("in_proj", torch::nn::Linear(o.in_dim, o.width));
  state_pos_ = register_parameter("state_pos", torch::zeros({1, o.n_state, o.width}));
  queries_ = register_parameter("queries", torch::zeros({1, o.n_mix + 1, o.width}));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  const auto hidden = static_cast<int64_t>(static_cast<double>(o.width) * o.mlp_ratio + 0.5);
  for (int64_t i = 0; i < o.depth; ++i)
    blocks_->push_back(Block(o.width, o.heads, hidden, 1.0, 1e-6));
  norm_ = register_module("norm",
                          torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.width}).eps(1e-6)));
  mean_head_ = register_module("mean_head", torch::nn::Linear(o.width, 2));
  logit_head_ = register_module("logit_head", torch::nn::Linear(o.width, o.n_mix));
  init_vit_weights(*this);
  trunc_normal_(state_pos_, 0.02);
  trunc_normal_(queries_, 0.02);
}

GazePolicyImpl::Output GazePolicyImpl::forward(const torch::Tensor& state,
                                               const torch::Tensor& extent) {
  const auto& o = options_;
  if (!state.defined() || state.dim() != 3 || state.size(1) != o.n_state ||
      state.size(2) != o.in_dim) {
    throw std::invalid_argument("state: expected [B, " + std::to_string(o.n_state) + ", " +
                                std::to_string(o.in_dim) + "]");
  }
  const int64_t b = state.size(0);
  check_extent(extent, b);
  const torch::Tensor tokens = linear(in_proj_, state.detach());
  // Every query also starts from the mean state token: through attention alone
  // the gaze would depend on the state only via projections initialised near
  // zero, and GRPO's few updates then learn one path for every image
  // (tests/workers/search_test.cpp).
  auto x = torch::cat(
      {tokens + state_pos_, queries_.expand({b, -1, -1}) + tokens.mean(1, /*keepdim=*/true)}, 1);
  for (const auto& block : *blocks_) x = block->as<Block>()->forward(x);
  x = norm_(x);
  auto q = x.narrow(1, o.n_state, o.n_mix + 1);
  Output out;
  // sigmoid keeps every mean strictly inside the image.
  out.means = torch::sigmoid(linear(mean_head_, q.narrow(1, 0, o.n_mix))) *
              extent.to(x.options()).unsqueeze(1);
  out.logits = linear(logit_head_, q.select(1, o.n_mix));
  return out;
}

GaussianMixture GazePolicyImpl::distribution(const torch::Tensor& state,
                                             const torch::Tensor& extent, double std) {
  auto out = forward(state, extent);
  return GaussianMixture(out.means, out.logits, std, extent);
}

}  // namespace saccade::model
