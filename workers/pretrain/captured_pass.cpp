#include "workers/pretrain/captured_pass.h"

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#if SACCADE_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace saccade::pretrain {
#if SACCADE_TORCH_HAS_CUDA
namespace {

// Eager runs before a capture: the first call of a shape allocates workspaces and plans
// (cuBLAS, attention) that a capture must find ready. torch.cuda.graph's docs ask for a few.
constexpr int kWarmupRuns = 3;

bool same_layout(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type() ||
        a[i].device() != b[i].device())
      return false;
  return true;
}

}  // namespace
#endif

struct CapturedPass::Impl {
  Pass pass;
  std::vector<at::Tensor> inputs, outputs;  // the graph's: replays read and write these
#if SACCADE_TORCH_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  int64_t captures = 0;

#if SACCADE_TORCH_HAS_CUDA
  void capture(const std::vector<at::Tensor>& like) {
    graph.reset();
    outputs.clear();
    inputs.clear();
    for (const at::Tensor& t : like) inputs.push_back(t.detach().clone());
    const c10::DeviceIndex index = like.front().device().index();
    c10::cuda::CUDAGuard device_guard(index);
    // Capture runs on a side stream (the default stream cannot be captured), after
    // everything queued so far.
    torch::cuda::synchronize(index);
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, index);
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      torch::NoGradGuard no_grad;
      for (int i = 0; i < kWarmupRuns; ++i) pass(inputs);
      side.synchronize();
      graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local: another thread's CUDA calls (a checkpoint copied to the host while a
      // step runs) neither break the capture nor enter the graph.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        outputs = pass(inputs);
      } catch (...) {
        // An operation that cannot be captured: end the capture so that the stream, and the
        // work after this error (the next variant of a benchmark), run normally.
        try {
          graph->capture_end();
        } catch (...) {
        }
        graph.reset();
        outputs.clear();
        throw;
      }
      graph->capture_end();
    }
    side.synchronize();
    ++captures;
  }
#endif
};

CapturedPass::CapturedPass(Pass pass) : impl_(std::make_unique<Impl>()) {
#if !SACCADE_TORCH_HAS_CUDA
  throw std::invalid_argument(
      "CUDA graphs (ssl.cuda_graphs) need a LibTorch with CUDA; this build's has none");
#endif
  impl_->pass = std::move(pass);
}

CapturedPass::~CapturedPass() = default;

std::vector<at::Tensor> CapturedPass::operator()(const std::vector<at::Tensor>& inputs) {
#if SACCADE_TORCH_HAS_CUDA
  if (inputs.empty() || !inputs.front().is_cuda())
    throw std::invalid_argument("CapturedPass: expected inputs on a CUDA device");
  Impl& m = *impl_;
  if (!m.graph || !same_layout(inputs, m.inputs)) m.capture(inputs);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) m.inputs[i].copy_(inputs[i]);
  m.graph->replay();  // on the current stream, after the copies
  return m.outputs;
#else
  (void)inputs;
  throw std::logic_error("CapturedPass without CUDA");  // the constructor refused already
#endif
}

int64_t CapturedPass::captures() const {
  return impl_->captures;
}

}  // namespace saccade::pretrain
