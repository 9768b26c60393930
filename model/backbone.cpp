#include "model/backbone.h"

#include "model/add_norm.h"

#include <stdexcept>
#include <string>

namespace saccade::model {
namespace {

std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

torch::Tensor StepOutput::first_state_normalized() const {
  return torch::nn::functional::normalize(
      state.select(1, 0), torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1).eps(1e-12));
}

FovealBackboneImpl::FovealBackboneImpl(const BackboneOptions& options) : options_(options) {
  options_.validate();
  const int64_t w = options_.width;
  patch_embed_ = register_module("patch_embed", torch::nn::Linear(options_.patch_dim(), w));
  pos_mlp_ = register_module("pos_mlp", Mlp(3, options_.pos_mlp_hidden, w));
  state_embed_ = register_parameter("state_embed", torch::zeros({options_.n_state, w}));
  using StateInput = BackboneOptions::StateInput;
  if (options_.state_input == StateInput::kProjected)
    state_proj_ = register_module("state_proj", torch::nn::Linear(w, w));
  if (options_.reads_memory_tokens())
    memory_embed_ = register_parameter("memory_embed", torch::zeros({options_.n_state, w}));
  if (options_.state_input == StateInput::kGated)
    state_gate_ = register_module("state_gate", torch::nn::Linear(2 * w, w));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.depth; ++i) {
    blocks_->push_back(Block(w, options_.heads, options_.mlp_hidden(), options_.layerscale_init,
                             options_.norm_eps, options_.gelu));
  }
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w}).eps(options_.norm_eps)));
  init_vit_weights(*this);
  trunc_normal_(state_embed_, 0.02);
  if (memory_embed_.defined()) trunc_normal_(memory_embed_, 0.02);
  if (!state_proj_.is_empty()) {  // zero: at initialisation a step reads only its own glimpse
    torch::NoGradGuard no_grad;
    state_proj_->weight.zero_();
  }
  if (!state_gate_.is_empty()) {  // the same gate for every image until it learns otherwise
    torch::NoGradGuard no_grad;
    state_gate_->weight.zero_();
    state_gate_->bias.fill_(BackboneOptions::kGateBiasInit);
  }
}

void FovealBackboneImpl::check_inputs(const torch::Tensor& patches, const torch::Tensor& positions,
                                      const torch::Tensor& state) const {
  const auto& o = options_;
  if (!patches.defined() || patches.dim() != 5 || patches.size(2) != o.channels ||
      patches.size(3) != o.patch_size || patches.size(4) != o.patch_size) {
    throw std::invalid_argument("patches: expected [B, T, " + std::to_string(o.channels) + ", " +
                                std::to_string(o.patch_size) + ", " + std::to_string(o.patch_size) +
                                "], got " + (patches.defined() ? shape_of(patches) : "undefined"));
  }
  if (!positions.defined() || positions.dim() != 3 || positions.size(0) != patches.size(0) ||
      positions.size(1) != patches.size(1) || positions.size(2) != 3) {
    throw std::invalid_argument("positions: expected [B, T, 3] matching patches " +
                                shape_of(patches) + ", got " +
                                (positions.defined() ? shape_of(positions) : "undefined"));
  }
  if (state.defined() && (state.dim() != 3 || state.size(0) != patches.size(0) ||
                          state.size(1) != o.n_state || state.size(2) != o.width)) {
    throw std::invalid_argument("state: expected [" + std::to_string(patches.size(0)) + ", " +
                                std::to_string(o.n_state) + ", " + std::to_string(o.width) +
                                "], got " + shape_of(state));
  }
  if (!patches.is_floating_point() || !positions.is_floating_point()) {
    throw std::invalid_argument("patches, positions: expected floating-point tensors");
  }
}

StepOutput FovealBackboneImpl::step(const torch::Tensor& patches, const torch::Tensor& positions,
                                    const torch::Tensor& state) {
  check_inputs(patches, positions, state);
  const int64_t b = patches.size(0), t = patches.size(1);
  // No backprop through time: the incoming state is a constant of this step.
  const bool memory = memory_embed_.defined();  // memory or gated
  auto s = !state.defined() || memory ? initial_state(b)
           : state_proj_.is_empty()   ? state.detach()
                                      : linear(state_proj_, state.detach());
  std::vector<torch::Tensor> tokens = {s + state_embed_.unsqueeze(0)};
  if (memory && state.defined()) tokens.push_back(state.detach() + memory_embed_.unsqueeze(0));
  tokens.push_back(linear(patch_embed_, patches.reshape({b, t, options_.patch_dim()})) +
                   pos_mlp_(positions));
  // The residual stream in the parameters' type: bf16 weights keep it bf16 even when the
  // carried state arrives in fp32 (autocast's final LayerNorm); a no-op in fp32.
  for (auto& group : tokens) group = group.to(state_embed_.scalar_type());
  auto x = torch::cat(tokens, 1);
  Residual stream{std::move(x), {}};
  for (const auto& block : *blocks_) stream = block->as<Block>()->forward_residual(stream);
  x = add_layer_norm(stream.x, stream.pending, norm_).normed;
  StepOutput out;
  out.state = x.narrow(1, 0, options_.n_state);
  if (!state_gate_.is_empty() && state.defined()) {
    const auto carried = state.detach();
    const auto g = torch::sigmoid(linear(state_gate_, torch::cat({out.state, carried}, -1)));
    out.state = carried + g * (out.state - carried);
  }
  out.patch_tokens = x.narrow(1, x.size(1) - t, t);
  return out;
}

torch::Tensor FovealBackboneImpl::initial_state(int64_t batch) const {
  return torch::zeros({batch, options_.n_state, options_.width}, state_embed_.options());
}

}  // namespace saccade::model
