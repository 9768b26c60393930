// The fused residual add + LayerNorm's CUDA kernels against its CPU loop, float32 and
// bfloat16, widths that take 1 to 8 vectors per lane, a row count that leaves warps idle and
// one that makes every warp of the backward grid take several rows, with and without a
// residual gradient. Sums run in another order, so values agree to float rounding (one
// bfloat16 step where that rounding carries). Skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/device_math.h"
#include "kernels/extract.h"
#include "kernels/layer_norm.h"

namespace saccade::kernels {
namespace {

// Device copy of `bytes` bytes of `host`; freed by DeviceBuffers.
struct DeviceBuffers {
  std::vector<void*> owned;
  ~DeviceBuffers() {
    for (void* p : owned) cudaFree(p);
  }
  void* copy(const void* host, size_t bytes) {
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, bytes + 16), cudaSuccess);
    if (host != nullptr) {
      EXPECT_EQ(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    owned.push_back(d);
    return d;
  }
};

std::vector<std::uint8_t> values_of(const std::vector<float>& v, FloatType type) {
  const size_t size = type == FloatType::kBFloat16 ? 2 : 4;
  std::vector<std::uint8_t> out(v.size() * size);
  for (size_t i = 0; i < v.size(); ++i) {
    if (type == FloatType::kBFloat16) {
      const std::uint16_t b = bf16_bits(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    }
  }
  return out;
}

float value_at(const std::vector<std::uint8_t>& bytes, FloatType type, size_t i) {
  if (type == FloatType::kBFloat16) {
    std::uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return float_of_bf16(b);
  }
  float f;
  std::memcpy(&f, bytes.data() + 4 * i, 4);
  return f;
}

void expect_close(const std::vector<std::uint8_t>& cpu, const std::vector<std::uint8_t>& gpu,
                  FloatType type, size_t count, float scale, const char* what) {
  const float step = type == FloatType::kBFloat16 ? 1.0f / 128 : 1e-5f;
  int bad = 0;
  for (size_t i = 0; i < count && bad < 5; ++i) {
    const float a = value_at(cpu, type, i), b = value_at(gpu, type, i);
    if (std::abs(a - b) > step * (std::abs(a) + scale)) {
      ADD_FAILURE() << what << "[" << i << "]: cpu " << a << " gpu " << b;
      ++bad;
    }
  }
}

TEST(CudaAddLayerNorm, MatchesTheCpuLoop) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device present";
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n(0, 1);
  for (const FloatType type : {FloatType::kFloat32, FloatType::kBFloat16}) {
    for (const int width : {64, 384, 392, 768, 1024}) {
      // One draw per type and width, its first rows for the smaller count.
      const size_t size = type == FloatType::kBFloat16 ? 2 : 4, most = 20000 * size_t(width);
      auto draw = [&](size_t k, float scale, float shift) {
        std::vector<float> v(k);
        for (float& e : v) e = shift + scale * n(rng);
        return values_of(v, type);
      };
      const auto x = draw(most, 2, 0.5f), branch = draw(most, 0.5f, 0);
      const auto gamma = draw(static_cast<size_t>(width), 0.3f, 1),
                 beta = draw(static_cast<size_t>(width), 0.1f, 0);
      const auto dy = draw(most, 1, 0), d_sum = draw(most, 1, 0);
      for (const std::int64_t rows : {std::int64_t{5}, std::int64_t{20000}}) {
        for (const bool residual : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << (type == FloatType::kBFloat16 ? "bf16" : "fp32") << " width " << width
                       << " rows " << rows << (residual ? " with" : " without")
                       << " residual gradient");
          const NormShape shape{rows, width, type};
          const size_t count = static_cast<size_t>(rows) * width;
          // CPU
          std::vector<std::uint8_t> sum(count * size), y(count * size), dx(count * size),
              dg(static_cast<size_t>(width) * size), db(static_cast<size_t>(width) * size);
          std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
          add_layer_norm_forward(shape,
                                 {x.data(), branch.data(), gamma.data(), beta.data(), sum.data(),
                                  y.data(), mean.data(), rstd.data()},
                                 1e-6f);
          add_layer_norm_backward(
              shape, {dy.data(), sum.data(), mean.data(), rstd.data(), gamma.data(),
                      residual ? d_sum.data() : nullptr, dx.data(), dg.data(), db.data()});
          // GPU
          DeviceBuffers d;
          void* d_x = d.copy(x.data(), x.size());
          void* d_branch = d.copy(branch.data(), branch.size());
          void* d_gamma_in = d.copy(gamma.data(), gamma.size());
          void* d_beta_in = d.copy(beta.data(), beta.size());
          void* d_dy = d.copy(dy.data(), dy.size());
          void* d_dsum = d.copy(d_sum.data(), d_sum.size());
          void* d_sum_out = d.copy(nullptr, sum.size());
          void* d_y = d.copy(nullptr, y.size());
          void* d_dx = d.copy(nullptr, dx.size());
          void* d_dg = d.copy(nullptr, dg.size());
          void* d_db = d.copy(nullptr, db.size());
          auto* d_mean = static_cast<float*>(d.copy(nullptr, mean.size() * 4));
          auto* d_rstd = static_cast<float*>(d.copy(nullptr, rstd.size() * 4));
          auto* scratch =
              static_cast<float*>(d.copy(nullptr, add_layer_norm_scratch_floats(shape) * 4));
          add_layer_norm_forward_cuda(
              shape, {d_x, d_branch, d_gamma_in, d_beta_in, d_sum_out, d_y, d_mean, d_rstd}, 1e-6f,
              nullptr);
          add_layer_norm_backward_cuda(shape,
                                       {d_dy, d_sum_out, d_mean, d_rstd, d_gamma_in,
                                        residual ? d_dsum : nullptr, d_dx, d_dg, d_db},
                                       scratch, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          auto back = [](const void* p, size_t bytes) {
            std::vector<std::uint8_t> h(bytes);
            EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
            return h;
          };
          EXPECT_EQ(back(d_sum_out, sum.size()), sum) << "the sums differ";
          expect_close(y, back(d_y, y.size()), type, count, 1, "y");
          expect_close(dx, back(d_dx, dx.size()), type, count, 1, "dx");
          // Parameter gradients add `rows` terms: float rounding grows with them.
          expect_close(dg, back(d_dg, dg.size()), type, static_cast<size_t>(width),
                       std::sqrt(static_cast<float>(rows)), "d_gamma");
          expect_close(db, back(d_db, db.size()), type, static_cast<size_t>(width),
                       std::sqrt(static_cast<float>(rows)), "d_beta");
        }
      }
    }
  }
}

TEST(CudaAddLayerNorm, RefusesAWidthTheKernelsCannotTake) {
  const NormShape shape{4, 100, FloatType::kBFloat16};  // not a multiple of 8 values
  EXPECT_FALSE(add_layer_norm_cuda_supports(shape));
  std::vector<char> host(16);
  void* p = host.data();
  float* f = reinterpret_cast<float*>(host.data());
  EXPECT_THROW(add_layer_norm_forward_cuda(shape, {p, p, p, p, p, p, f, f}, 1e-6f, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace saccade::kernels
