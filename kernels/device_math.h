// Scalar helpers compiled for the host and for CUDA devices alike (kernels shared by the CPU
// loops and the CUDA kernels: photometric_ops.h, layer_norm.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SACCADE_HD __host__ __device__ inline
#else
#define SACCADE_HD inline
#endif

namespace saccade::kernels {

// bfloat16 bits of `v`, rounded to nearest even; NaN stays a quiet NaN (c10::BFloat16's rule).
SACCADE_HD std::uint16_t bf16_bits(float v) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t u = __float_as_uint(v);
#else
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
#endif
  if (v != v) return 0x7FC0;
  return static_cast<std::uint16_t>((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
}

// The float a bfloat16 holds (exact).
SACCADE_HD float float_of_bf16(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t{bits} << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// The element type of a kernel's float input or output: float32, or bfloat16 rounded to
// nearest even (as LibTorch's conversion rounds), for a model that runs in bf16.
enum class FloatType { kFloat32, kBFloat16 };

// Value `i` of an array of type `type`, as a float.
SACCADE_HD float load_value(const void* in, FloatType type, std::int64_t i) {
  return type == FloatType::kBFloat16 ? float_of_bf16(static_cast<const std::uint16_t*>(in)[i])
                                      : static_cast<const float*>(in)[i];
}

// Stores value `i` of an array of type `type`.
SACCADE_HD void store_value(void* out, FloatType type, std::int64_t i, float v) {
  if (type == FloatType::kBFloat16)
    static_cast<std::uint16_t*>(out)[i] = bf16_bits(v);
  else
    static_cast<float*>(out)[i] = v;
}

}  // namespace saccade::kernels
