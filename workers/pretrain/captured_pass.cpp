#include "workers/pretrain/captured_pass.h"

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#if SACCADE_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 11
#include <ATen/core/CachingHostAllocator.h>
#endif
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

// After a capture that failed inside CUDAGraph::capture_end (before it told the allocators
// the capture was over): take `pool` out of capture mode and give it back, or the allocators
// keep filtering allocations through the dead graph and stop reusing recorded blocks.
void release_failed_capture_pool(c10::DeviceIndex device, c10::MempoolId_t pool) {
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
  } catch (...) {  // capture_end got that far
  }
  c10::cuda::CUDACachingAllocator::releasePool(device, pool);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 11  // page-locked blocks in captures
  try {
    at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool);
  } catch (...) {
  }
  try {
    at::getHostAllocator(at::kCUDA)->release_pool(pool);
  } catch (...) {  // this LibTorch's captures leave page-locked memory alone
  }
#endif
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
    // everything queued so far; from the high-priority pool, so that it is never the stream
    // a BatchStager's thread is copying on (its work would enter the capture).
    torch::cuda::synchronize(index);
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(true, index);
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      torch::NoGradGuard no_grad;
      for (int i = 0; i < kWarmupRuns; ++i) pass(inputs);
      side.synchronize();
      graph = std::make_unique<at::cuda::CUDAGraph>();
      const c10::MempoolId_t pool = at::cuda::graph_pool_handle();
      // Thread-local: another thread's CUDA calls (a checkpoint copied to the host while a
      // step runs) neither break the capture nor enter the graph.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      try {
        outputs = pass(inputs);
      } catch (...) {
        // An operation that cannot be captured: end the capture so that the stream, and the
        // work after this error (the next variant of a benchmark), run normally.
        bool ended = false;
        try {
          graph->capture_end();
          ended = true;  // the graph gives its pool back when it goes
        } catch (...) {
        }
        if (!ended) release_failed_capture_pool(index, pool);
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
