// Gradients averaged over learners in buckets, as PyTorch's DDP does: each bucket is one
// flat fp32 buffer of about `bucket_bytes`, all-reduced as one message. Overlapped, a
// hook on every parameter copies its gradient into its bucket the moment autograd has
// it, and a bucket whose gradients are all in starts its all-reduce while backward goes
// on (buckets start in one fixed order, the same on every learner, as collectives must);
// otherwise every bucket is reduced after backward.
#pragma once

#include <cstdint>
#include <memory>

#include "workers/ssl/collectives.h"
#include "workers/ssl/optim.h"

namespace saccade::ssl {

class GradientBuckets {
 public:
  // `compute`: the parameters backward runs on (bf16 copies, or the masters themselves);
  // `masters`: where the averaged fp32 gradients go; the same order and shapes.
  // Needs collectives.sum, and collectives.start_sum when `overlap`. Hooks, when
  // overlapping, stay on `compute` until this object goes. Parameters that do not require
  // a gradient are left out: their masters get none.
  GradientBuckets(const NamedParameters& compute, const NamedParameters& masters,
                  Collectives collectives, bool overlap, int64_t bucket_bytes = 25 << 20);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Before backward: the hooks take the gradients of the next backward pass.
  void arm();

  // After backward: starts the buckets still waiting (a parameter without a gradient
  // counts as zeros), waits for all, and sets every master's gradient to the average
  // over learners; the compute parameters' own gradients are dropped when they are not
  // the masters. Throws what the collectives throw.
  void finish();

  // Buckets whose all-reduce began before finish() in the last step (while backward ran).
  int64_t started_during_backward() const;
  int64_t buckets() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the flat buffers, the hooks' state and pending waits
};

}  // namespace saccade::ssl
