// What the model's calls into kernels/ (which knows nothing of LibTorch) need of a tensor's
// device: its current CUDA stream as an opaque handle, its index, LibTorch's allocator, and rows
// the kernels can read.
#pragma once

#include <torch/types.h>

#include "kernels/device_math.h"
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

// The kernels' name for t's floating type (float32 unless bfloat16).
kernels::FloatType kernel_float_type(const torch::Tensor& t);

// Whether a fused kernel can take x and `others` as they are: x non-empty, float32 or
// bfloat16, every other tensor defined and of x's type on x's device, and not under autocast
// (where LibTorch's operations would run in other types than the tensors').
bool kernel_operands(const torch::Tensor& x, std::initializer_list<const torch::Tensor*> others);

// `t` contiguous, and on a GPU 16-byte aligned (the CUDA kernels move rows as 16-byte vectors;
// a view into the middle of a tensor may start elsewhere: then a copy).
torch::Tensor aligned_rows(const torch::Tensor& t);

}  // namespace saccade::model
