#include "model/device_stream.h"

#include <cstdint>
#include <stdexcept>

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace saccade::model {

void* current_stream(const torch::Device& device) {
  if (!device.is_cuda()) return nullptr;
#if SACCADE_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  throw std::invalid_argument("current_stream: this build's LibTorch has no CUDA (device " +
                              device.str() + ")");
#endif
}

int device_index(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  if (device.has_index()) return device.index();
#if SACCADE_TORCH_HAS_CUDA
  return c10::cuda::current_device();
#else
  throw std::invalid_argument("device_index: this build's LibTorch has no CUDA (device " +
                              device.str() + ")");
#endif
}

torch::Tensor aligned_rows(const torch::Tensor& t) {
  torch::Tensor rows = t.contiguous();
  if (rows.is_cuda() && reinterpret_cast<std::uintptr_t>(rows.data_ptr()) % 16 != 0)
    rows = rows.clone();
  return rows;
}

}  // namespace saccade::model
