#include "model/device_stream.h"

#include "model/torch_compat.h"

#include <cstdint>
#include <stdexcept>

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
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

#if SACCADE_TORCH_HAS_CUDA
namespace {
class CachingDeviceAllocator final : public kernels::DeviceAllocator {
 public:
  void* allocate(std::size_t bytes, void* stream) override {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
        bytes, static_cast<cudaStream_t>(stream));
  }
  void release(void* memory) override { c10::cuda::CUDACachingAllocator::raw_delete(memory); }
};
}  // namespace
#endif

kernels::DeviceAllocator* caching_device_allocator() {
#if SACCADE_TORCH_HAS_CUDA
  static CachingDeviceAllocator allocator;
  return &allocator;
#else
  return nullptr;
#endif
}

kernels::FloatType kernel_float_type(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? kernels::FloatType::kBFloat16
                                             : kernels::FloatType::kFloat32;
}

bool kernel_operands(const torch::Tensor& x, std::initializer_list<const torch::Tensor*> others) {
  if (x.dim() < 1 || x.numel() == 0 || autocast_enabled(x.device().type())) return false;
  const auto type = x.scalar_type();
  if (type != torch::kFloat && type != torch::kBFloat16) return false;
  for (const torch::Tensor* t : others)
    if (!t->defined() || t->scalar_type() != type || t->device() != x.device()) return false;
  return true;
}

torch::Tensor aligned_rows(const torch::Tensor& t) {
  torch::Tensor rows = t.contiguous();
  if (rows.is_cuda() && reinterpret_cast<std::uintptr_t>(rows.data_ptr()) % 16 != 0)
    rows = rows.clone();
  return rows;
}

}  // namespace saccade::model
