// Peak memory of a device's caching allocator, for sizing the batch a learner's GPU
// holds. CUDA devices of a CUDA LibTorch only; elsewhere nothing is counted.
#pragma once

#include <torch/types.h>

namespace saccade::bench {

// Gives the allocator's cached blocks back to the device and starts counting the peak afresh
// (no-op off CUDA).
void reset_peak_device_memory(const torch::Device& device);
// GiB the allocator handed out at most since the last reset; NaN off CUDA.
double peak_device_memory_gib(const torch::Device& device);

}  // namespace saccade::bench
