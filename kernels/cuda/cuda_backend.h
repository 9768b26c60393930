// The CUDA backend of kernels/extract.h (compiled only with SACCADE_WITH_CUDA).
// Plain C++ header: no CUDA types, so host code includes it without nvcc.
#pragma once

#include <memory>
#include <span>

#include "kernels/extract.h"

namespace saccade::kernels::cuda {

// Number of CUDA devices; 0 when there is none or no driver.
int device_count();

// An Extractor whose tables live in device memory (uint32, same layout as the CPU
// IntegralImage), taken from `allocator` (not owned, outlives the extractor; nullptr:
// cudaMalloc). Bit-identical results to the CPU backend. Throws std::runtime_error when the
// device cannot be used.
std::unique_ptr<Extractor> make_cuda_extractor(int device, DeviceAllocator* allocator = nullptr);

}  // namespace saccade::kernels::cuda
