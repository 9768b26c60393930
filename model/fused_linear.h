// Linear layers whose neighbours' work runs inside their matrix products on a GPU
// (kernels/linear_epilogues.h, cuBLASLt's epilogues) instead of as passes of their own over
// the activations: a transformer block's MLP with its GELU (forward the GELU and the
// pre-activation, backward the GELU's gradient and the first bias's gradient), and any linear
// layer's bias gradient inside its weight gradient's product.
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
// With bias_grad on in the scope as well, its second layer's weight and bias gradients come
// from one product too.
torch::Tensor mlp_gelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2,
                       BackboneOptions::Gelu gelu);

// x W^T + b (ATen's linear: one product with the bias inside it). Inside a FusedScope with
// bias_grad on, when gradients are wanted and the call allows it (the conditions above, `in`
// and `out` multiples of 8, a bias), its backward computes the weight and bias gradients in
// one product (BGRADB). Otherwise exactly ATen's linear. Not differentiable twice either.
torch::Tensor linear_fused(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias);

}  // namespace saccade::model
