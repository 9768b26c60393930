// Plain option structs of the model: aggregates without torch, so the job
// config (workers/) can fill them field by field. Every struct has validate(),
// which throws std::invalid_argument naming the offending field.
#pragma once

#include <cstdint>
#include <string>

namespace saccade::model {

// The foveal ViT backbone (paper "Architectures"; DINOv2-flavoured pre-norm ViT).
struct BackboneOptions {
  int64_t patch_size = 16;        // P: patches arrive as [B, T, channels, P, P]
  int64_t channels = 3;           // C: 1 (grey) or 3 (RGB)
  int64_t depth = 12;             // transformer blocks
  int64_t width = 384;            // embedding dimension
  int64_t heads = 6;              // attention heads; width % heads == 0
  double mlp_ratio = 4.0;         // MLP hidden = round(width * mlp_ratio)
  int64_t n_state = 8;            // N_state learned state tokens
  int64_t pos_mlp_hidden = 128;   // hidden units of the (x, y, z) positional MLP
  double layerscale_init = 1e-5;  // DINOv2 ViT-S value
  double norm_eps = 1e-6;         // LayerNorm epsilon (DINOv2 uses 1e-6)
  // How the state carried from the previous step re-enters a step (model.state_input):
  // kNormed (the paper): the previous final-LayerNorm output, as the state tokens;
  // kProjected: through a learned Linear (state_proj) initialised at zero, so that a
  // fresh step's small updates are not drowned by it; kMemory: the state tokens start
  // afresh every step and the carried state comes in as n_state more tokens (plus
  // memory_embed) that they read through attention, so nothing is copied forward by
  // the residual stream; kGated: as kMemory, and the step's new state is then mixed with the
  // carried one per channel, old + g * (new - old), g = sigmoid(state_gate(new, old)), so that
  // a glimpse that sees nothing new can leave what an earlier one saw in place (a GRU-like
  // update without backprop through time: the gate learns from the current step's loss).
  enum class StateInput { kNormed, kProjected, kMemory, kGated };
  // Initial bias of the gate (kGated): sigmoid(2) = 0.88 of the new state at initialisation.
  static constexpr double kGateBiasInit = 2.0;
  StateInput state_input = StateInput::kNormed;
  // The GELU of the blocks' MLPs (model.gelu): kErf, 0.5 x (1 + erf(x / sqrt 2)) (ViT, DINOv2),
  // or kTanh, its tanh approximation (GPT-2's; within 1e-3 of it), the form cuBLASLt computes
  // inside a matrix product's epilogue (kernels/linear_epilogues.h, ssl.fused_mlp).
  enum class Gelu { kErf, kTanh };
  Gelu gelu = Gelu::kErf;

  // ViT-S/16 of the paper: 12 blocks, 384 wide, 6 heads, 8 state tokens.
  static BackboneOptions vit_s() { return BackboneOptions{}; }
  // A CPU preset (sized from the CPU step times in docs/references.md): 6 blocks, 192 wide, 3
  // heads.
  static BackboneOptions tiny() {
    BackboneOptions o;
    o.depth = 6;
    o.width = 192;
    o.heads = 3;
    o.pos_mlp_hidden = 64;
    return o;
  }
  int64_t mlp_hidden() const {
    return static_cast<int64_t>(static_cast<double>(width) * mlp_ratio + 0.5);
  }
  int64_t patch_dim() const { return channels * patch_size * patch_size; }
  // kMemory and kGated read the carried state as n_state more tokens.
  bool reads_memory_tokens() const {
    return state_input == StateInput::kMemory || state_input == StateInput::kGated;
  }
  void validate() const;
};

// "normed", "projected", "memory", "gated" (config and export metadata); parse throws
// std::invalid_argument naming model.state_input.
const char* state_input_name(BackboneOptions::StateInput s);
BackboneOptions::StateInput parse_state_input(const std::string& name);
// "erf", "tanh"; parse throws std::invalid_argument naming model.gelu.
const char* gelu_name(BackboneOptions::Gelu g);
BackboneOptions::Gelu parse_gelu(const std::string& name);

// DINO projection head on the first state token (DINOv2's head; docs/references.md).
struct DinoHeadOptions {
  int64_t in_dim = 384;  // backbone width
  int64_t hidden_dim = 2048;
  int64_t bottleneck_dim = 256;
  int64_t n_prototypes = 65536;        // K
  bool train_prototype_scale = false;  // weight-norm g trainable (DINOv2) or fixed at 1 (DINO)
  void validate() const;
};

// Task head: linear on the first state token, or a one-layer transformer that
// pools all state tokens through a learned query.
struct TaskHeadOptions {
  enum class Kind { kLinear, kTransformer };
  Kind kind = Kind::kLinear;
  int64_t in_dim = 384;  // backbone width
  int64_t n_state = 8;   // state tokens read (transformer kind)
  int64_t n_classes = 1000;
  int64_t heads = 6;       // transformer kind only
  double mlp_ratio = 4.0;  // transformer kind only
  void validate() const;
};

// Gaze policy: a transformer over the state tokens plus n_mix + 1 learned
// queries; the first n_mix give the GMM means, the last the mixture logits.
struct PolicyOptions {
  int64_t in_dim = 384;  // backbone width (state tokens are projected to width)
  int64_t n_state = 8;
  int64_t width = 192;
  int64_t depth = 6;
  int64_t heads = 3;
  double mlp_ratio = 4.0;
  int64_t n_mix = 4;  // N_mixture components
  void validate() const;
};

}  // namespace saccade::model
