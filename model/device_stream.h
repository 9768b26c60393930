// The current CUDA stream of a device as an opaque handle, for the kernels that queue work on
// a caller's stream (kernels/ knows nothing of LibTorch).
#pragma once

#include <torch/types.h>

namespace saccade::model {

// The current stream of `device` as a cudaStream_t; nullptr on a CPU. Throws
// std::invalid_argument for a CUDA device in a build whose LibTorch has no CUDA.
void* current_stream(const torch::Device& device);

// The device's index; for a CUDA device named without one ("cuda"), the current CUDA device
// (as LibTorch places its tensors); 0 on a CPU.
int device_index(const torch::Device& device);

}  // namespace saccade::model
