#include "bench/learner/device_memory.h"

#include <cmath>

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace saccade::bench {

void reset_peak_device_memory(const torch::Device& device) {
#if SACCADE_TORCH_HAS_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

double peak_device_memory_gib(const torch::Device& device) {
#if SACCADE_TORCH_HAS_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: every pool
    return static_cast<double>(stats.allocated_bytes[kAggregate].peak) / (1 << 30);
  }
#else
  (void)device;
#endif
  return NAN;
}

}  // namespace saccade::bench
