// What the model's calls into kernels/ (which knows nothing of LibTorch) need of a tensor's
// device: its current CUDA stream as an opaque handle, its index, LibTorch's allocator, and rows
// the kernels can read.
#pragma once

#include <torch/types.h>

#include "kernels/extract.h"

namespace saccade::model {

// The current stream of `device` as a cudaStream_t; nullptr on a CPU. Throws
// std::invalid_argument for a CUDA device in a build whose LibTorch has no CUDA.
void* current_stream(const torch::Device& device);

// The device's index; for a CUDA device named without one ("cuda"), the current CUDA device
// (as LibTorch places its tensors); 0 on a CPU.
int device_index(const torch::Device& device);

// LibTorch's CUDA caching allocator, for the kernels that take device memory of their own
// (kernels::ExtractorOptions::device_allocator): one pool with the model's tensors. Lives as
// long as the process; nullptr in a build whose LibTorch has no CUDA.
kernels::DeviceAllocator* caching_device_allocator();

// `t` contiguous, and on a GPU 16-byte aligned (the CUDA kernels move rows as 16-byte vectors;
// a view into the middle of a tensor may start elsewhere: then a copy).
torch::Tensor aligned_rows(const torch::Tensor& t);

}  // namespace saccade::model
