// CUDA kernels of the fused residual add + LayerNorm (kernels/layer_norm.h): a warp per row,
// the row in registers as 16-byte vectors; backward grid-strides each warp over rows keeping
// its columns' d_gamma / d_beta partial sums in registers, adds the warps' sums in a fixed
// order per block, and a second kernel adds the blocks' (deterministic: no atomics).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device_math.h"

namespace saccade::kernels::cuda::detail {
namespace {

constexpr int kWarps = 8;                 // warps (rows at a time) per block
constexpr int kMaxBackwardBlocks = 1024;  // partial sums per column: the scratch's rows

template <typename T>
struct Vec;

template <>
struct Vec<float> {  // 4 floats in 16 bytes
  static constexpr int kValues = 4;
  __device__ static void unpack(const uint4& u, float* v) {
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float* v) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  }
  __device__ static float rounded(float v) { return v; }
};

template <>
struct Vec<std::uint16_t> {  // 8 bfloat16 in 16 bytes, element 0 in the low half
  static constexpr int kValues = 8;
  __device__ static void unpack(const uint4& u, float* v) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = float_of_bf16(static_cast<std::uint16_t>(w[i] & 0xFFFFu));
      v[2 * i + 1] = float_of_bf16(static_cast<std::uint16_t>(w[i] >> 16));
    }
  }
  __device__ static uint4 pack(const float* v) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = unsigned{bf16_bits(v[2 * i])} | (unsigned{bf16_bits(v[2 * i + 1])} << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  __device__ static float rounded(float v) {
    return float_of_bf16(bf16_bits(v));
  }
};

__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// Vector `vec` of row `row` (vectors of V::kValues values).
template <typename T>
__device__ uint4 load_vec(const void* base, long long row, int width, int vec) {
  const T* p = static_cast<const T*>(base) + row * width + vec * Vec<T>::kValues;
  return *reinterpret_cast<const uint4*>(p);
}

template <typename T>
__device__ void store_vec(void* base, long long row, int width, int vec, const float* v) {
  T* p = static_cast<T*>(base) + row * width + vec * Vec<T>::kValues;
  *reinterpret_cast<uint4*>(p) = Vec<T>::pack(v);
}

// kVecs: vectors per lane at most (width / kValues / 32, rounded up).
template <typename T, int kVecs>
__global__ void add_norm_forward(NormShape s, AddNormForward f, float eps) {
  using V = Vec<T>;
  constexpr int kN = V::kValues;
  const int lane = threadIdx.x % 32;
  const long long row = static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= s.rows) return;
  const int vecs = s.width / kN;
  float v[kVecs][kN];
  float total = 0;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = lane + 32 * i;
    if (vec >= vecs) continue;
    float x[kN], b[kN];
    V::unpack(load_vec<T>(f.x, row, s.width, vec), x);
    V::unpack(load_vec<T>(f.branch, row, s.width, vec), b);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      v[i][k] = V::rounded(x[k] + b[k]);
      total += v[i][k];
    }
    store_vec<T>(f.sum, row, s.width, vec, v[i]);
  }
  const float mean = warp_sum(total) / static_cast<float>(s.width);
  float squares = 0;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (lane + 32 * i >= vecs) continue;
#pragma unroll
    for (int k = 0; k < kN; ++k) squares += (v[i][k] - mean) * (v[i][k] - mean);
  }
  const float rstd = rsqrtf(warp_sum(squares) / static_cast<float>(s.width) + eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = lane + 32 * i;
    if (vec >= vecs) continue;
    float g[kN], b[kN], y[kN];
    V::unpack(load_vec<T>(f.gamma, 0, s.width, vec), g);
    V::unpack(load_vec<T>(f.beta, 0, s.width, vec), b);
#pragma unroll
    for (int k = 0; k < kN; ++k) y[k] = (v[i][k] - mean) * rstd * g[k] + b[k];
    store_vec<T>(f.y, row, s.width, vec, y);
  }
  if (lane == 0) f.mean[row] = mean, f.rstd[row] = rstd;
}

// partial[block][0, width): d_gamma's partial sums, [width, 2 width): d_beta's.
template <typename T, int kVecs>
__global__ void add_norm_backward(NormShape s, AddNormBackward b, float* partial) {
  using V = Vec<T>;
  constexpr int kN = V::kValues;
  extern __shared__ float block_sums[];  // [2 * width]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int vecs = s.width / kN;
  for (int j = threadIdx.x; j < 2 * s.width; j += blockDim.x) block_sums[j] = 0;
  float dg[kVecs][kN] = {}, db[kVecs][kN] = {};
  for (long long row = static_cast<long long>(blockIdx.x) * kWarps + warp; row < s.rows;
       row += static_cast<long long>(gridDim.x) * kWarps) {
    const float mean = b.mean[row], rstd = b.rstd[row];
    float xhat[kVecs][kN], g[kVecs][kN];
    float g_sum = 0, gx_sum = 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int vec = lane + 32 * i;
      if (vec >= vecs) continue;
      float dy[kN], sum[kN], gamma[kN];
      V::unpack(load_vec<T>(b.dy, row, s.width, vec), dy);
      V::unpack(load_vec<T>(b.sum, row, s.width, vec), sum);
      V::unpack(load_vec<T>(b.gamma, 0, s.width, vec), gamma);
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        xhat[i][k] = (sum[k] - mean) * rstd;
        g[i][k] = dy[k] * gamma[k];
        g_sum += g[i][k];
        gx_sum += g[i][k] * xhat[i][k];
        dg[i][k] += dy[k] * xhat[i][k];
        db[i][k] += dy[k];
      }
    }
    const float g_mean = warp_sum(g_sum) / static_cast<float>(s.width);
    const float gx_mean = warp_sum(gx_sum) / static_cast<float>(s.width);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int vec = lane + 32 * i;
      if (vec >= vecs) continue;
      float dx[kN], d_sum[kN] = {};
      if (b.d_sum != nullptr) V::unpack(load_vec<T>(b.d_sum, row, s.width, vec), d_sum);
#pragma unroll
      for (int k = 0; k < kN; ++k)
        dx[k] = rstd * (g[i][k] - g_mean - xhat[i][k] * gx_mean) + d_sum[k];
      store_vec<T>(b.dx, row, s.width, vec, dx);
    }
  }
  // The warps' sums into the block's, one warp at a time (a fixed order: deterministic).
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (warp != w) continue;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int vec = lane + 32 * i;
      if (vec >= vecs) continue;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        block_sums[vec * kN + k] += dg[i][k];
        block_sums[s.width + vec * kN + k] += db[i][k];
      }
    }
  }
  __syncthreads();
  float* out = partial + static_cast<long long>(blockIdx.x) * 2 * s.width;
  for (int j = threadIdx.x; j < 2 * s.width; j += blockDim.x) out[j] = block_sums[j];
}

// d_gamma, d_beta = the blocks' partial sums added: a block per 32 columns, 32 x 32 threads,
// each thread a strided run of blocks, then the 32 runs of a column added in order.
__global__ void add_norm_parameter_grads(NormShape s, AddNormBackward b, const float* partial,
                                         int blocks) {
  __shared__ float runs[32][33];
  const int column = blockIdx.x * 32 + threadIdx.x;  // of 2 * width: d_gamma's, then d_beta's
  float acc = 0;
  if (column < 2 * s.width)
    for (int blk = threadIdx.y; blk < blocks; blk += 32)
      acc += partial[static_cast<long long>(blk) * 2 * s.width + column];
  runs[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || column >= 2 * s.width) return;
  float total = 0;
  for (int r = 0; r < 32; ++r) total += runs[r][threadIdx.x];
  if (column < s.width)
    store_value(b.d_gamma, s.type, column, total);
  else
    store_value(b.d_beta, s.type, column - s.width, total);
}

int backward_blocks(long long rows) {
  return static_cast<int>(
      std::max(1LL, std::min<long long>((rows + kWarps - 1) / kWarps, kMaxBackwardBlocks)));
}

template <typename T, int kVecs>
cudaError_t forward_as(const NormShape& s, const AddNormForward& f, float eps,
                       cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((s.rows + kWarps - 1) / kWarps);
  add_norm_forward<T, kVecs><<<blocks, kWarps * 32, 0, stream>>>(s, f, eps);
  return cudaGetLastError();
}

template <typename T, int kVecs>
cudaError_t backward_as(const NormShape& s, const AddNormBackward& b, float* scratch,
                        cudaStream_t stream) {
  const int blocks = backward_blocks(s.rows);
  const std::size_t shared = 2 * static_cast<std::size_t>(s.width) * sizeof(float);
  add_norm_backward<T, kVecs><<<blocks, kWarps * 32, shared, stream>>>(s, b, scratch);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  add_norm_parameter_grads<<<(2 * s.width + 31) / 32, dim3(32, 32), 0, stream>>>(s, b, scratch,
                                                                                 blocks);
  return cudaGetLastError();
}

// launch.run<T, kVecs>() for the shape's type and vectors per lane (1, 2, 4 or 8: a row of
// at most 1,024 values; bfloat16 needs at most 4).
template <class Launch>
cudaError_t dispatch(const NormShape& s, const Launch& launch) {
  const bool bf16 = s.type == FloatType::kBFloat16;
  const int per_lane = (s.width / (bf16 ? 8 : 4) + 31) / 32;
  if (per_lane <= 1)
    return bf16 ? launch.template run<std::uint16_t, 1>() : launch.template run<float, 1>();
  if (per_lane <= 2)
    return bf16 ? launch.template run<std::uint16_t, 2>() : launch.template run<float, 2>();
  if (per_lane <= 4 || bf16)
    return bf16 ? launch.template run<std::uint16_t, 4>() : launch.template run<float, 4>();
  return launch.template run<float, 8>();
}

struct ForwardLaunch {
  const NormShape& s;
  const AddNormForward& f;
  float eps;
  cudaStream_t stream;
  template <typename T, int kVecs>
  cudaError_t run() const {
    return forward_as<T, kVecs>(s, f, eps, stream);
  }
};

struct BackwardLaunch {
  const NormShape& s;
  const AddNormBackward& b;
  float* scratch;
  cudaStream_t stream;
  template <typename T, int kVecs>
  cudaError_t run() const {
    return backward_as<T, kVecs>(s, b, scratch, stream);
  }
};

}  // namespace

std::size_t add_norm_scratch_floats(long long rows, int width) {
  return static_cast<std::size_t>(backward_blocks(rows)) * 2 * static_cast<std::size_t>(width);
}

cudaError_t launch_add_norm_forward(const NormShape& s, const AddNormForward& f, float eps,
                                    cudaStream_t stream) {
  if (s.rows == 0) return cudaSuccess;
  return dispatch(s, ForwardLaunch{s, f, eps, stream});
}

cudaError_t launch_add_norm_backward(const NormShape& s, const AddNormBackward& b, float* scratch,
                                     cudaStream_t stream) {
  return dispatch(s, BackwardLaunch{s, b, scratch, stream});
}

}  // namespace saccade::kernels::cuda::detail
