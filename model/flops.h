// Analytic FLOP count of one backbone step (no torch). A multiply-add counts
// as 2 FLOPs; softmax, norms, GELU and adds are left out (a few % at ViT sizes).
#pragma once

#include <cstdint>

#include "model/options.h"

namespace saccade::model {

struct StepFlops {
  int64_t tokens = 0;     // n_state (+ n_state memory tokens) + patch tokens
  int64_t embed = 0;      // patch Linear + positional MLP
  int64_t attention = 0;  // qkv, QK^T, AV, output projection, all blocks
  int64_t mlp = 0;        // both MLP Linears, all blocks
  int64_t forward() const { return embed + attention + mlp; }
  // Backward costs about twice the forward (gradients w.r.t. inputs and weights).
  int64_t forward_backward() const { return 3 * forward(); }
};

// FLOPs of step() on one sample with `patch_tokens` patches; `carries_state`: a
// step given a previous state (its state_proj or memory tokens count).
StepFlops step_flops(const BackboneOptions& options, int64_t patch_tokens,
                     bool carries_state = false);

// FLOPs of the DINO head on one token: its three MLP Linears and the prototypes.
int64_t dino_head_flops(const DinoHeadOptions& options);

}  // namespace saccade::model
