#include "bench/learner/device.h"

#include <torch/torch.h>

#include <cmath>

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace saccade::bench {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void reset_peak_device_memory(const torch::Device& device) {
#if SACCADE_TORCH_HAS_CUDA
  if (!device.is_cuda()) return;
  // The allocator starts with the first tensor on a device: before it, its stats refuse the
  // device. A figure missing is no reason to stop a benchmark.
  const c10::DeviceIndex index = device.has_index() ? device.index() : 0;
  try {
    torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, index));
    // Blocks a variant before left cached (all of them, after one ran out of memory) go back
    // to the device: each variant starts from the device's memory as a fresh process would.
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
  } catch (const c10::Error&) {
  }
#else
  (void)device;
#endif
}

double peak_device_memory_gib(const torch::Device& device) {
#if SACCADE_TORCH_HAS_CUDA
  if (device.is_cuda()) {
    try {
      const auto stats =
          c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
      constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: every pool
      return static_cast<double>(stats.allocated_bytes[kAggregate].peak) / (1 << 30);
    } catch (const c10::Error&) {
    }
  }
#else
  (void)device;
#endif
  return NAN;
}

}  // namespace saccade::bench
