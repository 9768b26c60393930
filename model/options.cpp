#include "model/options.h"

#include <stdexcept>
#include <string>

#include "model/flops.h"

namespace saccade::model {
namespace {

void require(bool ok, const char* field, const std::string& expected) {
  if (!ok) throw std::invalid_argument(std::string(field) + ": expected " + expected);
}

}  // namespace

void BackboneOptions::validate() const {
  require(patch_size > 0, "model.patch_size", "> 0");
  require(channels > 0, "model.channels", "> 0");
  require(depth > 0, "model.depth", "> 0");
  require(width > 0, "model.width", "> 0");
  require(heads > 0 && width % heads == 0, "model.heads", "> 0 and a divisor of model.width");
  require(mlp_ratio > 0, "model.mlp_ratio", "> 0");
  require(n_state > 0, "model.n_state", "> 0");
  require(pos_mlp_hidden > 0, "model.pos_mlp_hidden", "> 0");
  require(layerscale_init > 0, "model.layerscale_init", "> 0");
  require(norm_eps > 0, "model.norm_eps", "> 0");
}

const char* state_input_name(BackboneOptions::StateInput s) {
  switch (s) {
    case BackboneOptions::StateInput::kProjected:
      return "projected";
    case BackboneOptions::StateInput::kMemory:
      return "memory";
    case BackboneOptions::StateInput::kGated:
      return "gated";
    default:
      return "normed";
  }
}

BackboneOptions::StateInput parse_state_input(const std::string& name) {
  for (auto s : {BackboneOptions::StateInput::kNormed, BackboneOptions::StateInput::kProjected,
                 BackboneOptions::StateInput::kMemory, BackboneOptions::StateInput::kGated})
    if (name == state_input_name(s)) return s;
  throw std::invalid_argument(
      "model.state_input: expected normed, projected, memory or gated, got \"" + name + "\"");
}

const char* gelu_name(BackboneOptions::Gelu g) {
  return g == BackboneOptions::Gelu::kTanh ? "tanh" : "erf";
}

BackboneOptions::Gelu parse_gelu(const std::string& name) {
  for (auto g : {BackboneOptions::Gelu::kErf, BackboneOptions::Gelu::kTanh})
    if (name == gelu_name(g)) return g;
  throw std::invalid_argument("model.gelu: expected erf or tanh, got \"" + name + "\"");
}

void DinoHeadOptions::validate() const {
  require(in_dim > 0, "dino_head.in_dim", "> 0");
  require(hidden_dim > 0, "dino_head.hidden_dim", "> 0");
  require(bottleneck_dim > 0, "dino_head.bottleneck_dim", "> 0");
  require(n_prototypes > 0, "dino_head.n_prototypes", "> 0");
}

void TaskHeadOptions::validate() const {
  require(in_dim > 0, "task_head.in_dim", "> 0");
  require(n_state > 0, "task_head.n_state", "> 0");
  require(n_classes > 0, "task_head.n_classes", "> 0");
  if (kind == Kind::kTransformer) {
    require(heads > 0 && in_dim % heads == 0, "task_head.heads", "> 0 and a divisor of in_dim");
    require(mlp_ratio > 0, "task_head.mlp_ratio", "> 0");
  }
}

void PolicyOptions::validate() const {
  require(in_dim > 0, "policy.in_dim", "> 0");
  require(n_state > 0, "policy.n_state", "> 0");
  require(width > 0, "policy.width", "> 0");
  require(depth > 0, "policy.depth", "> 0");
  require(heads > 0 && width % heads == 0, "policy.heads", "> 0 and a divisor of policy.width");
  require(mlp_ratio > 0, "policy.mlp_ratio", "> 0");
  require(n_mix > 0, "policy.n_mix", "> 0");
}

StepFlops step_flops(const BackboneOptions& o, int64_t patch_tokens, bool carries_state) {
  o.validate();
  if (patch_tokens < 0) throw std::invalid_argument("patch_tokens: expected >= 0");
  // A step that carries a state (every glimpse but the first): state_proj, or
  // n_state memory tokens more (and the gate's [2w -> w] per state token).
  using StateInput = BackboneOptions::StateInput;
  const bool gated = carries_state && o.state_input == StateInput::kGated;
  const bool memory = carries_state && o.reads_memory_tokens();
  const int64_t n = o.n_state * (memory ? 2 : 1) + patch_tokens, w = o.width, h = o.mlp_hidden();
  StepFlops f;
  f.tokens = n;
  f.embed = 2 * patch_tokens * (o.patch_dim() * w + 3 * o.pos_mlp_hidden + o.pos_mlp_hidden * w);
  if (carries_state && o.state_input == StateInput::kProjected) f.embed += 2 * o.n_state * w * w;
  if (gated) f.embed += 2 * o.n_state * 2 * w * w;
  // per block: qkv (3 w^2), scores QK^T (n w), weighted sum AV (n w), projection (w^2)
  f.attention = o.depth * 2 * n * (3 * w * w + 2 * n * w + w * w);
  f.mlp = o.depth * 2 * n * (2 * w * h);
  return f;
}

int64_t dino_head_flops(const DinoHeadOptions& o) {
  o.validate();
  const int64_t h = o.hidden_dim;
  return 2 * (o.in_dim * h + h * h + h * o.bottleneck_dim + o.bottleneck_dim * o.n_prototypes);
}

}  // namespace saccade::model
