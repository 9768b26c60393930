// The sequential-to-global DINO objective (paper Sec. "Sequential-to-Global
// Self-Supervised Pretraining", Algorithm 1): Sinkhorn-Knopp teacher centring
// and KoLeo exactly as DINOv2 (facebookresearch/dinov2; docs/references.md), DINO's EMA centring as
// the alternative, and the loss combining them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

#include "workers/ssl/collectives.h"

namespace saccade::ssl {

struct SinkhornOptions {
  int64_t iterations = 3;
  // Subtract each prototype's maximum logit over the (global) batch before
  // exp. Exact: the first row normalisation cancels any per-prototype factor.
  // Needs all_reduce_max when distributed. (A per-SAMPLE max would change the
  // result at a finite number of iterations, so it is not offered.) It cures
  // overflow (large logits); a sample whose every logit lies > ~87 tau below
  // the prototypes' maxima still underflows to a zero column (NaN), as
  // DINOv2's does. With DINOv2's head (|logit| <= 1) exp overflows fp32 only
  // for temp < 1/88, which the config refuses (ssl.teacher_temp_*).
  bool subtract_max = false;
  AllReduceSum all_reduce_sum;                      // sums over learners; empty = one process
  std::function<void(at::Tensor&)> all_reduce_max;  // maxes over learners (subtract_max only)
};

// DINOv2 sinkhorn_knopp_teacher: teacher_logits [B, K] (this learner's rows),
// computed in fp32 without gradient. Q = exp(t / temp)^T, Q /= sum(Q); then
// `iterations` times: rows (prototypes) /= row sums, /= K; columns (samples)
// /= column sums, /= B; finally Q *= B and transpose. B is the GLOBAL batch
// (the sum of every learner's rows). Returns [B_local, K]: each row sums to 1,
// each prototype's column sums to about B_global / K over all learners.
at::Tensor sinkhorn_knopp(const at::Tensor& teacher_logits, double teacher_temp,
                          const SinkhornOptions& options = {});

// DINO's centring (DINOLoss): softmax((teacher_logits - center) / temp) over
// prototypes, fp32, without gradient. teacher_logits [B, K], center [1, K].
at::Tensor centred_softmax(const at::Tensor& teacher_logits, const at::Tensor& center,
                           double teacher_temp);

// DINO's update_center: center = momentum * center + (1 - momentum) * the mean
// of teacher_logits [B, K] over the GLOBAL batch (all_reduce_sum sums the rows'
// sum and count over learners; empty = one process). In place on center [1, K].
void update_center(at::Tensor& center, const at::Tensor& teacher_logits, double momentum,
                   const AllReduceSum& all_reduce_sum = {});

// DINOv2 KoLeoLoss on x [B, D] (B >= 2): L2-normalise rows (eps 1e-8), nearest
// neighbour of each row by max dot product with the diagonal excluded, then
// -mean log(pairwise_distance(x_i, x_nn(i)) + 1e-8), where pairwise_distance
// is torch's ||x_i - x_nn + 1e-8||_2 as in nn.PairwiseDistance. Differentiable.
at::Tensor koleo_loss(const at::Tensor& x);

// Student views at student temperature, all [*, B, K] head logits of the first state token.
struct StudentOutputs {
  at::Tensor global;        // [B, K]
  at::Tensor local;         // [L, B, K]
  at::Tensor sequential;    // [S, B, K]: every step of the sequential view
  at::Tensor global_token;  // [B, D]: first state token of the global view, before the
                            // head (KoLeo input; undefined when koleo_weight == 0)
};

struct ObjectiveOptions {
  double teacher_temp = 0.07;
  double student_temp = 0.1;
  double koleo_weight = 0.1;
  double global_weight = 1.0 / 8;  // L_static = global_weight H_global + local_weight H_local
  double local_weight = 7.0 / 8;
  double sequential_weight = 1.0 / 2;  // dino = (1 - it) L_static + it mean_k H(step_k)
  // false (the paper): every step against the mean of both targets; true: against the
  // teacher's global-view target alone.
  bool sequential_targets_global = false;
  SinkhornOptions sinkhorn;  // its all-reduce makes the centring global
  // Defined [1, K]: DINO's centring with this centre (centred_softmax) instead of
  // Sinkhorn-Knopp; the caller updates it after the step (update_center).
  at::Tensor center;
};

// Parts of the loss for logging: detached scalars (call .item() when logging).
struct LossParts {
  at::Tensor loss;         // the differentiable total: dino + koleo_weight * koleo
  at::Tensor dino;         // (1 - w) static + w sequential; w = sequential_weight (1/2)
  at::Tensor static_loss;  // global_weight * global + local_weight * local
  at::Tensor global;       // H(student global, targets)
  at::Tensor local;        // mean over local views of H(local_l, targets)
  at::Tensor sequential;   // mean over steps of H(step_k, targets)
  at::Tensor per_step;     // [S]: H(step_k, targets)
  at::Tensor koleo;        // unweighted KoLeo (0 when off)
};

// Teacher targets [2, B, K]: Sinkhorn-Knopp (or, with options.center, DINO's
// centring) over the union of the teacher's global-view logits and its
// sequential view's FINAL-step logits (both [B, K]), at teacher temperature,
// without gradient.
at::Tensor teacher_targets(const at::Tensor& teacher_global, const at::Tensor& teacher_final_step,
                           const ObjectiveOptions& options);

// H(s, targets) = mean over the 2 targets t and the batch of -sum_k t_k log_softmax(s / tau_s)_k.
// The loss: L = (1 - w) L_static + w mean_k H(step_k) + koleo_weight * KoLeo(global_token),
// w = sequential_weight (Algorithm 1: 1/2).
// Every student view is matched with BOTH teacher targets (teacher and student
// crops are distinct, so no pair is skipped). Computed in fp32 whatever the
// inputs' dtype (bf16 logits from autocast). Throws std::invalid_argument on
// mismatched shapes.
LossParts sequential_to_global_loss(const at::Tensor& targets, const StudentOutputs& student,
                                    const ObjectiveOptions& options);

// Collapse monitors over targets [..., K] (rows are distributions): mean
// entropy of a row (nats) and how many prototypes are some row's argmax, as 0-dim
// tensors on the targets' device (reading them is the caller's synchronisation).
struct TargetStats {
  at::Tensor mean_entropy;     // fp32
  at::Tensor prototypes_used;  // int64
};
TargetStats target_stats(const at::Tensor& targets);

}  // namespace saccade::ssl
