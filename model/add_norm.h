// The residual add of a pre-norm transformer block and the LayerNorm after it, as one
// operation, so that it can run as the fused kernels of kernels/layer_norm.h: in forward one
// read of x and the branch and one write of their sum and its normalisation; in backward one
// pass that also adds the gradient reaching the sum along the residual stream and sums the
// LayerNorm's parameter gradients (LibTorch runs an add, a LayerNorm, its input gradient, its
// parameter gradients and the residual gradient's add as five kernels).
#pragma once

#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

namespace saccade::model {

struct AddNormOutput {
  torch::Tensor sum;     // x + branch (x when there is no branch): the residual stream
  torch::Tensor normed;  // norm(sum)
};

// sum = x + branch, normed = norm(sum). Through the fused kernels inside a FusedScope with
// add_norm on (fused_ops.h), when the call allows them: a branch of x's shape, x, branch and
// the LayerNorm's weight and bias of one floating type (float32 or bfloat16, i.e. not under
// autocast's mixed types), a width the kernels take, on the CPU or on a CUDA device of a
// build with the CUDA kernels. Otherwise LibTorch's add and layer_norm, the same operations
// as without this function (tests/model/add_norm_test.cpp).
AddNormOutput add_layer_norm(const torch::Tensor& x, const torch::Tensor& branch,
                             torch::nn::LayerNorm norm);

}  // namespace saccade::model
