#include "workers/ssl/device_stream.h"

#include <stdexcept>

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace saccade::ssl {

void* current_stream(const torch::Device& device) {
  if (!device.is_cuda()) return nullptr;
#if SACCADE_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  throw std::invalid_argument("current_stream: this build's LibTorch has no CUDA (device " +
                              device.str() + ")");
#endif
}

}  // namespace saccade::ssl
