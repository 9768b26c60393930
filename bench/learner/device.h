// What the step benches ask of a device: to finish its queued work before a clock is read,
// and the peak memory of its caching allocator, for sizing the batch a learner's GPU holds
// (CUDA devices of a CUDA LibTorch only; elsewhere nothing is counted).
#pragma once

#include <torch/types.h>

namespace saccade::bench {

// Waits for every kernel queued on `device` (no-op off CUDA: the CPU runs them in order).
void synchronize(const torch::Device& device);

// Gives the allocator's cached blocks back to the device and starts counting the peak afresh
// (no-op off CUDA).
void reset_peak_device_memory(const torch::Device& device);
// GiB the allocator handed out at most since the last reset; NaN off CUDA.
double peak_device_memory_gib(const torch::Device& device);

}  // namespace saccade::bench
