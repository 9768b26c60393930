// Per-device peak throughput, the denominator of model FLOP utilisation (MFU).
// Torch-free: the GPU's name comes from the CUDA driver (libcuda, loaded at run
// time), so this works in CPU builds and processes without LibTorch.
#pragma once

#include <string>

namespace saccade {

// The name the CUDA driver gives device `index` (as CUDA_VISIBLE_DEVICES
// numbers them), e.g. "NVIDIA H100 80GB HBM3"; "" without a driver or device.
std::string cuda_device_name(int index);

// Dense (no sparsity) peak TFLOP/s of a GPU named `device_name` for matrix
// products in `precision` ("bf16" or "bf16-params": tensor cores; "fp32": plain FP32 units,
// which LibTorch's matmuls use unless TF32 is switched on). 0 when the device
// is not in the table (docs/model.md lists it, with NVIDIA's data sheets).
double table_peak_tflops(const std::string& device_name, const std::string& precision);

// The peak a learner on `device` ("cpu", "cuda", "cuda:N") divides by:
// `configured` when > 0 (ssl.peak_tflops), else the table's figure for the GPU,
// else 0 (unknown: MFU is then not reported).
double resolve_peak_tflops(double configured, const std::string& device,
                           const std::string& precision);

}  // namespace saccade
