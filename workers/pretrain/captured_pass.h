// A fixed-shape pass without autograd, replayed as one CUDA graph. On a GPU at the batches
// a learner takes, the teacher's forward is about a thousand short kernels launched one by
// one from the host, and the host's dispatch, not the device, sets its time
// (docs/model.md, "The training step on a GPU"); a graph launches them all at once.
//
// The trainer captures two such passes (ssl.cuda_graphs): the teacher's forward, and with
// batched glimpses the student's pass that computes the states its glimpses carry.
//
// The pass must read only its inputs and tensors whose storage stays put (parameters
// updated in place: AdamW, the EMA and the bf16 copies all are), synchronise nothing with
// the host and not run under autocast (its cast cache cannot live in a graph).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace at {
class Tensor;
}

namespace saccade::pretrain {

class CapturedPass {
 public:
  using Pass = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

  // Throws std::invalid_argument when this build's LibTorch has no CUDA.
  explicit CapturedPass(Pass pass);
  ~CapturedPass();
  CapturedPass(const CapturedPass&) = delete;
  CapturedPass& operator=(const CapturedPass&) = delete;

  // The pass's outputs for `inputs` (tensors on one CUDA device), without gradient. The
  // first call, and any call whose inputs change shape or dtype, runs the pass eagerly a few
  // times on a side stream (allocator, cuBLAS and attention plans settle) and captures it;
  // every call copies the inputs into the graph's own and replays it. The outputs are the
  // graph's: the next call overwrites them.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs);

  int64_t captures() const;  // graphs captured so far (one unless the shapes changed)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the graph, its inputs and outputs
};

}  // namespace saccade::pretrain
