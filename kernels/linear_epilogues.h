// Work a linear layer's neighbours do on its output, moved inside its matrix product as
// cuBLASLt epilogues (NVIDIA Transformer Engine's LayerNormMLP and Linear do the same), so
// that it makes no pass of its own over the activations:
// - a transformer MLP's GELU:
//     forward   pre = x W1^T + b1,  h = gelu(pre)          one product, h and pre written
//     backward  d_pre = (dy W2) * gelu'(pre),  d_b1 = the column sums of d_pre
//                                                          one product, d_pre and d_b1 written
//   where W1, b1 are the first linear layer's weight and bias, W2 the second's weight, dy the
//   gradient of the second layer's output. Unfused, the GELU reads and writes the hidden
//   activations (4x the model width) once more in forward, its gradient three times more in
//   backward, and the bias gradient reads them once more: 16 of the ~55 activation-width
//   passes of a ViT block's step. The GELU is the tanh form,
//     gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
//   the only one cuBLASLt's epilogues compute (LibTorch's gelu(x, "tanh"));
// - a linear layer's bias gradient inside its weight gradient's product: d_W = dy^T x and
//   d_b = the column sums of dy in one product (unfused, a reduction reads dy once more).
// CUDA only (cuBLASLt): on a CPU LibTorch's operations are the implementation
// (model/fused_linear.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/device_math.h"

namespace saccade::kernels {

// The MLP x [rows, in] -> h [rows, hidden] -> y [rows, out]. Row-major matrices of `type`
// (float32 or bfloat16) in device memory, as LibTorch lays out contiguous tensors.
struct LinearGeluShape {
  std::int64_t rows = 0;
  int in = 0;
  int hidden = 0;
  int out = 0;
  FloatType type = FloatType::kBFloat16;
};

struct LinearGeluForward {
  const void* x = nullptr;       // [rows, in]
  const void* weight = nullptr;  // W1 [hidden, in], as LibTorch's Linear stores it
  const void* bias = nullptr;    // b1 [hidden]
  void* h = nullptr;             // [rows, hidden] out: gelu(pre)
  void* pre = nullptr;           // [rows, hidden] out, for backward; nullptr: not written
};

struct LinearGeluBackward {
  const void* dy = nullptr;      // [rows, out]
  const void* weight = nullptr;  // W2 [out, hidden]
  const void* pre = nullptr;     // [rows, hidden], from forward
  void* d_pre = nullptr;         // [rows, hidden] out
  void* d_bias = nullptr;        // [hidden] out: the gradient of b1
};

// Device memory each call may use as cuBLASLt's workspace (the caller's, per call, 256-byte
// aligned): 32 MiB, what PyTorch gives cuBLASLt on Hopper.
inline constexpr std::size_t kEpilogueWorkspaceBytes = std::size_t{32} << 20;

// A linear layer y = x W^T + b over `rows` rows: x [rows, in], W [out, in], row-major.
struct WeightGradShape {
  std::int64_t rows = 0;
  int in = 0;
  int out = 0;
  FloatType type = FloatType::kBFloat16;
};

struct WeightGradBias {
  const void* dy = nullptr;  // [rows, out]: the gradient of y
  const void* x = nullptr;   // [rows, in]
  void* d_weight = nullptr;  // [out, in] out: dy^T x
  void* d_bias = nullptr;    // [out] out: the column sums of dy
};

// Whether this build has the CUDA backend and cuBLASLt on `device` has an algorithm for every
// product of this shape (asked once per shape and thread, then remembered). The calls below
// need sizes of at least 1, `hidden`, `in` and `out` multiples of 8 and every pointer 16-byte
// aligned; false otherwise.
bool linear_gelu_cuda_supports(const LinearGeluShape& shape, int device);

// Queued on `stream` (a cudaStream_t; nullptr: the default stream) of the current device, no
// wait. Throw std::invalid_argument naming the field for a shape or pointer the calls do not
// take (a workspace of nonzero size must be non-null and 256-byte aligned), std::runtime_error
// when the CUDA backend is not compiled in or cuBLASLt fails.
void linear_gelu_forward_cuda(const LinearGeluShape& shape, const LinearGeluForward& f,
                              void* workspace, std::size_t workspace_bytes, void* stream);
void linear_gelu_backward_cuda(const LinearGeluShape& shape, const LinearGeluBackward& b,
                               void* workspace, std::size_t workspace_bytes, void* stream);

// The same for the weight and bias gradients of a linear layer: sizes of at least 1, `in` and
// `out` multiples of 8, pointers 16-byte aligned.
bool weight_grad_bias_cuda_supports(const WeightGradShape& shape, int device);
void weight_grad_bias_cuda(const WeightGradShape& shape, const WeightGradBias& g, void* workspace,
                           std::size_t workspace_bytes, void* stream);

}  // namespace saccade::kernels
