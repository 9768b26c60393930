// The one place where LibTorch versions differ for the model: fused attention.
// LibTorch >= 2.0 has torch::scaled_dot_product_attention (flash / memory-
// efficient kernels where available); Debian's 1.13 does not, so it gets the
// plain softmax(Q K^T / sqrt(d)) V, which is what 2.x's math backend computes.
#pragma once

#include <cmath>

#include <torch/torch.h>

namespace saccade::model {

// q, k, v: [B, heads, N, head_dim] -> [B, heads, N, head_dim]; no mask, no dropout.
inline torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return torch::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  return torch::matmul(torch::softmax(scores, -1), v);
#endif
}

}  // namespace saccade::model
