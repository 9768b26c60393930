// Analytic model FLOPs of one sequential-to-global DINO training step (paper
// Algorithm 1), per image, from the backbone's per-step count (model/flops.h).
// Torch-free. docs/model.md, "FLOPs and MFU", derives it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/flops.h"
#include "model/options.h"

namespace saccade::ssl {

// Tokens per view and views per image of one training batch.
struct SslViewShapes {
  int64_t global_tokens = 0;   // per global view (teacher and student: one each)
  int64_t local_tokens = 0;    // per local view
  int64_t local_views = 0;     // L
  int64_t glimpse_tokens = 0;  // per glimpse of a sequential view
  int64_t glimpses = 0;        // K (teacher and student: one sequential view each)
};

struct SslStepFlops {
  int64_t teacher_forward = 0;  // global view + K glimpses + the head on 2 tokens (no grad)
  int64_t student_forward =
      0;  // global + L local views + K glimpses + the head on 1 + L + K tokens
  // Backward of the student: gradients w.r.t. inputs and weights, twice its forward.
  int64_t student_backward() const { return 2 * student_forward; }
  int64_t total() const { return teacher_forward + student_forward + student_backward(); }
};

// Per image. `supervised`: the labelled baseline (no teacher forward).
SslStepFlops ssl_step_flops(const model::BackboneOptions& backbone,
                            const model::DinoHeadOptions& head, const SslViewShapes& views,
                            bool supervised = false);

// One pass of the backbone in a training step, as the trainer runs it: `sequences` token
// sequences of `tokens` tokens each, through every block, `calls` times per step; with
// `backward`, its gradients too. Then the DINO head on `head_rows` of its state tokens,
// `head_calls` times (0: no head after this pass). `model_flops`: false for the pass batched
// glimpses add (the states carried into glimpses 2..K recomputed without gradient: hardware
// FLOPs, not model FLOPs).
struct StepPass {
  std::string name;  // e.g. "teacher global", "student glimpses 2..K"
  int64_t sequences = 0, tokens = 0, calls = 0;
  bool backward = false;
  bool model_flops = true;
  int64_t head_rows = 0, head_calls = 0;
};

// The backbone passes of one step at `batch` images (`batched_glimpses`: the student's
// glimpses 2..K in one pass, after a pass without gradient that carries the states,
// ssl.batched_glimpses).
std::vector<StepPass> step_passes(const model::BackboneOptions& backbone,
                                  const model::DinoHeadOptions& head, const SslViewShapes& views,
                                  int64_t batch, bool batched_glimpses, bool supervised = false);

// One matrix product of a linear layer in a training step: [m, k] x [k, n] (the layer's
// weight is [n, k]), `calls` times per step; with `backward`, its input gradient ([m, n] x
// [n, k]) and weight gradient ([n, m] x [m, k]) too.
struct StepProduct {
  std::string pass;   // a StepPass's name (+ " head")
  std::string layer;  // qkv, proj, fc1, fc2 (every block), head 1-3, prototypes
  int64_t m = 0, k = 0, n = 0;
  int64_t calls = 0;
  bool backward = false;
  bool model_flops = true;
  int64_t flops() const { return 2 * m * k * n * calls * (backward ? 3 : 1); }
};

// The linear layers' products of the step's passes. Left out: the patch embedding, the
// positional MLP and the state input (a few % of the FLOPs), and attention's QK^T and AV
// (its own kernel: step_passes gives its shapes).
std::vector<StepProduct> step_products(const model::BackboneOptions& backbone,
                                       const model::DinoHeadOptions& head,
                                       const SslViewShapes& views, int64_t batch,
                                       bool batched_glimpses, bool supervised = false);

}  // namespace saccade::ssl
