// Analytic model FLOPs of one sequential-to-global DINO training step (paper
// Algorithm 1), per image, from the backbone's per-step count (model/flops.h).
// Torch-free. docs/model.md, "FLOPs and MFU", derives it.
#pragma once

#include <cstdint>

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

}  // namespace saccade::ssl
