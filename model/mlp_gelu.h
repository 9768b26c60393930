// A transformer block's MLP, gelu(x W1^T + b1) W2^T + b2, as one operation, so that on a GPU
// its GELU can run inside the two matrix products (kernels/linear_gelu.h: cuBLASLt's epilogues
// compute the GELU and the pre-activation forward, the GELU's gradient and the first bias's
// gradient backward) instead of as passes of their own over the hidden activations.
#pragma once

#include <torch/types.h>

#include "model/options.h"

namespace saccade::model {

// x [..., in] -> [..., out] with W1 [hidden, in], b1 [hidden], W2 [out, hidden], b2 [out].
// Through the fused products inside a FusedScope with mlp on (fused_ops.h), when the call
// allows them: the tanh GELU, tensors of one floating type (float32 or bfloat16, i.e. not under
// autocast) on one CUDA device, in, hidden and out multiples of 8, in a build with the CUDA
// kernels and a cuBLASLt that has the epilogues for the shape. Otherwise LibTorch's linear,
// gelu and linear, the same operations as without this function. Without gradient (no input
// requiring one, or under no_grad) the fused forward writes no pre-activation. The fused
// backward is not itself differentiable: no second-order gradients (create_graph) through it.
torch::Tensor mlp_gelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2,
                       BackboneOptions::Gelu gelu);

}  // namespace saccade::model
