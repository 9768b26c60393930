// The linear layers' epilogues (kernels/linear_epilogues.h) are CUDA-only; what every build
// checks is what a call is refused for, before anything is queued: sizes the products do not
// take and null or misaligned pointers and workspaces, named. The products themselves are
// checked on a GPU against LibTorch's operations (SslTrainer.TheLinearLayersEpilogues..., in
// pretrain_cuda_tests).
#include "kernels/linear_epilogues.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace saccade::kernels {
namespace {

// Aligned placeholder addresses: the calls are refused before any is read.
const void* address(std::uintptr_t k) {
  return reinterpret_cast<const void*>(k << 8);
}
void* mutable_address(std::uintptr_t k) {
  return reinterpret_cast<void*>(k << 8);
}

std::string refusal(const LinearGeluShape& s, LinearGeluForward f, void* workspace = nullptr,
                    std::size_t workspace_bytes = 0) {
  try {
    linear_gelu_forward_cuda(s, f, workspace, workspace_bytes, nullptr);
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::runtime_error& e) {
    return std::string("runtime_error: ") + e.what();
  }
  return "accepted";
}

TEST(LinearGelu, CallsTheProductsCannotTakeAreRefusedByName) {
  const LinearGeluForward f{address(1), address(2), address(3), mutable_address(4),
                            mutable_address(5)};
  const LinearGeluShape vit_s{300, 384, 1536, 384, FloatType::kBFloat16};
  for (const LinearGeluShape bad :
       {LinearGeluShape{300, 3, 1536, 384}, LinearGeluShape{300, 384, 1540, 384},
        LinearGeluShape{300, 384, 1536, 12}, LinearGeluShape{0, 384, 1536, 384}}) {
    const std::string why = refusal(bad, f);
    EXPECT_NE(why.find("linear_gelu_forward_cuda: rows"), std::string::npos) << why;
    EXPECT_NE(why.find("widths multiples of 8"), std::string::npos) << why;
  }
  LinearGeluForward no_x = f;
  no_x.x = nullptr;
  EXPECT_EQ(refusal(vit_s, no_x), "linear_gelu_forward_cuda: x is null");
  LinearGeluForward odd_bias = f;
  odd_bias.bias = static_cast<const char*>(address(3)) + 2;
  EXPECT_EQ(refusal(vit_s, odd_bias), "linear_gelu_forward_cuda: bias is not 16-byte aligned");
  LinearGeluForward odd_pre = f;
  odd_pre.pre = static_cast<char*>(mutable_address(5)) + 8;
  EXPECT_EQ(refusal(vit_s, odd_pre), "linear_gelu_forward_cuda: pre is not 16-byte aligned");

  EXPECT_EQ(refusal(vit_s, f, nullptr, 1024),
            "linear_gelu_forward_cuda: workspace must be non-null and 256-byte aligned");
  EXPECT_EQ(refusal(vit_s, f, static_cast<char*>(mutable_address(6)) + 128, 1024),
            "linear_gelu_forward_cuda: workspace must be non-null and 256-byte aligned");

  const LinearGeluBackward b{address(1), address(2), address(3), nullptr, mutable_address(5)};
  try {
    linear_gelu_backward_cuda(vit_s, b, nullptr, 0, nullptr);
    ADD_FAILURE() << "a backward without d_pre was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "linear_gelu_backward_cuda: d_pre is null");
  }
}

TEST(WeightGradBias, CallsTheProductCannotTakeAreRefusedByName) {
  auto refused = [](const WeightGradShape& s, const WeightGradBias& g) -> std::string {
    try {
      weight_grad_bias_cuda(s, g, nullptr, 0, nullptr);
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::runtime_error& e) {
      return std::string("runtime_error: ") + e.what();
    }
    return "accepted";
  };
  const WeightGradBias g{address(1), address(2), mutable_address(3), mutable_address(4)};
  EXPECT_EQ(refused({300, 384, 1154, FloatType::kBFloat16}, g),
            "weight_grad_bias_cuda: rows 300, in 384, out 1154: expected rows in [1, 2^31) and "
            "widths multiples of 8");
  WeightGradBias no_bias = g;
  no_bias.d_bias = nullptr;
  EXPECT_EQ(refused({300, 384, 1152, FloatType::kBFloat16}, no_bias),
            "weight_grad_bias_cuda: d_bias is null");
#ifndef SACCADE_KERNELS_CUDA
  EXPECT_FALSE(weight_grad_bias_cuda_supports({300, 384, 1152, FloatType::kBFloat16}, 0));
  EXPECT_EQ(refused({300, 384, 1152, FloatType::kBFloat16}, g),
            "runtime_error: weight_grad_bias_cuda: this build has no CUDA backend (configure with "
            "-DSACCADE_CUDA=ON)");
#endif
}

TEST(LinearGelu, ABuildWithoutTheCudaBackendSaysSo) {
#ifdef SACCADE_KERNELS_CUDA
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  const LinearGeluShape vit_s{300, 384, 1536, 384, FloatType::kBFloat16};
  EXPECT_FALSE(linear_gelu_cuda_supports(vit_s, 0));
  const LinearGeluForward f{address(1), address(2), address(3), mutable_address(4), nullptr};
  const std::string why = refusal(vit_s, f);
  EXPECT_NE(why.find("runtime_error: linear_gelu_forward_cuda: this build has no CUDA backend"),
            std::string::npos)
      << why;
#endif
}

}  // namespace
}  // namespace saccade::kernels
