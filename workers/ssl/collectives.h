// The learners' collectives as the trainer sees them: plain functions over tensors, which
// the learner's process group (workers/learner/learner_group.h) provides and tests fake.
// Every learner must call them in the same order.
#pragma once

#include <functional>

namespace at {
class Tensor;
}

namespace saccade::ssl {

// Sums a tensor in place over all learners (an all-reduce); empty in one process.
using AllReduceSum = std::function<void(at::Tensor&)>;
// Completes an all-reduce that AllReduceStart began; throws when it failed or timed out.
using AllReduceWait = std::function<void()>;
// Begins summing a tensor in place over all learners and returns at once; the tensor must
// stay alive, and untouched, until the returned wait has run.
using AllReduceStart = std::function<AllReduceWait(at::Tensor&)>;

struct Collectives {
  int world_size = 1;
  AllReduceSum sum;          // blocking; set whenever world_size > 1
  AllReduceStart start_sum;  // asynchronous; empty: gradients are summed after backward
};

}  // namespace saccade::ssl
