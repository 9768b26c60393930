// The residual add of a pre-norm transformer block fused with the LayerNorm after it:
//   sum = x + branch;  y = (sum - mean(sum)) / sqrt(var(sum) + eps) * gamma + beta
// per row of `width` values, and its backward fused with the gradient that reaches `sum`
// along the residual stream. Unfused, the add, the normalisation, its input gradient, the
// gamma / beta reduction and the residual gradient's add each read and write the activations
// on their own (8 activation-sized passes a LayerNorm in backward, 5 in forward); fused,
// backward reads dy, sum and the residual gradient once and writes dx once, and forward
// reads x and branch once and writes sum and y. As Apex's and flash-attention's fused
// "dropout + add + LayerNorm" kernels do.
// One interface, two backends: host memory on the CPU (a loop per row), device memory on a
// GPU (CUDA backend built with SACCADE_WITH_CUDA). Rows are contiguous, float32 or
// bfloat16 (rounded to nearest even, as LibTorch rounds); statistics and sums in float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/device_math.h"

namespace saccade::kernels {

struct NormShape {
  std::int64_t rows = 0;
  int width = 0;
  FloatType type = FloatType::kFloat32;
};

// The largest width the CUDA kernels take (a row lives in one warp's registers).
inline constexpr int kMaxFusedNormWidth = 1024;

// Forward. x, branch, gamma, beta: inputs (type); sum, y: outputs (type); mean, rstd:
// float32 [rows]. sum is rounded to `type` before it is normalised, as an add then a
// LayerNorm would do.
struct AddNormForward {
  const void* x = nullptr;
  const void* branch = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* sum = nullptr;
  void* y = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
};

// Backward. dy: the gradient of y; sum, mean, rstd: saved by forward; d_sum: the gradient
// that reaches sum along the residual stream (nullptr: none); dx: the gradient of sum's
// inputs x and branch (they get the same); d_gamma, d_beta: of the parameters (type).
struct AddNormBackward {
  const void* dy = nullptr;
  const void* sum = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* gamma = nullptr;
  const void* d_sum = nullptr;
  void* dx = nullptr;
  void* d_gamma = nullptr;
  void* d_beta = nullptr;
};

// Throws std::invalid_argument naming the field when rows < 0, width < 1, or a pointer the
// call needs is null.
void validate_norm(const NormShape& shape, const AddNormForward& f);
void validate_norm(const NormShape& shape, const AddNormBackward& b);

// CPU: host memory; num_threads 0 = all hardware threads.
void add_layer_norm_forward(const NormShape& shape, const AddNormForward& f, float eps,
                            int num_threads = 0);
void add_layer_norm_backward(const NormShape& shape, const AddNormBackward& b, int num_threads = 0);

// CUDA: device memory of the current device, queued on `stream` (a cudaStream_t; nullptr:
// the default stream), no wait. Backward needs `scratch` of add_layer_norm_scratch_floats
// floats (per-block partial sums of d_gamma and d_beta). Throw std::invalid_argument when
// width exceeds kMaxFusedNormWidth or is not a multiple of 8 values for bfloat16, 4 for
// float32, or a row pointer is not 16-byte aligned (rows go as 16-byte vectors), std::runtime_error
// when the CUDA backend is not compiled in or a launch fails.
void add_layer_norm_forward_cuda(const NormShape& shape, const AddNormForward& f, float eps,
                                 void* stream);
void add_layer_norm_backward_cuda(const NormShape& shape, const AddNormBackward& b, float* scratch,
                                  void* stream);
std::size_t add_layer_norm_scratch_floats(const NormShape& shape);

// Whether this build has the CUDA kernels and they take this shape (its width, above).
bool add_layer_norm_cuda_supports(const NormShape& shape);

}  // namespace saccade::kernels
