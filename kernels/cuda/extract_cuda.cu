// CUDA backend: summed-area table build (row scan, then a tiled column scan) and
// batched extraction (one block per patch, its (P+1)^2 x C corners staged in shared
// memory). Same uint32 wrapping table and the same float formula as the CPU backend,
// so results are bit-identical.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace saccade::kernels::cuda::detail {
namespace {

constexpr int kScanThreads = 256;  // row scan: threads per row block
constexpr int kTileRows = 64;      // column scan: rows per tile
constexpr int kPatchThreads = 256;

template <int C>
struct Sums {
  std::uint32_t v[C];
};
template <int C>
struct AddSums {
  __device__ Sums<C> operator()(const Sums<C>& a, const Sums<C>& b) const {
    Sums<C> r;
#pragma unroll
    for (int c = 0; c < C; ++c) r.v[c] = a.v[c] + b.v[c];
    return r;
  }
};

// One block per image row: prefix sums along x, written to table row y + 1.
// Tiles of kScanThreads * 4 pixels; each thread scans 4 pixels, the block scans the
// thread totals, a carry runs across tiles.
template <int C>
__global__ void row_scan_kernel(const std::uint8_t* image, int width, long long image_stride,
                                std::uint32_t* table, long long table_stride) {
  using BlockScan = cub::BlockScan<Sums<C>, kScanThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  __shared__ Sums<C> carry_shared;
  const int y = blockIdx.x;
  const std::uint8_t* src = image + y * image_stride;
  std::uint32_t* out = table + (y + 1) * table_stride;
  if (threadIdx.x < C) out[threadIdx.x] = 0;
  Sums<C> carry;
#pragma unroll
  for (int c = 0; c < C; ++c) carry.v[c] = 0;
  constexpr int kPer = 4;
  for (int base = 0; base < width; base += kScanThreads * kPer) {
    const int x0 = base + threadIdx.x * kPer;
    std::uint32_t px[kPer][C];
    Sums<C> local;
#pragma unroll
    for (int c = 0; c < C; ++c) local.v[c] = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int c = 0; c < C; ++c) {
        px[i][c] = x0 + i < width ? src[(x0 + i) * C + c] : 0u;
        local.v[c] += px[i][c];
      }
    Sums<C> excl, total;
    BlockScan(temp).ExclusiveScan(local, excl, Sums<C>{}, AddSums<C>(), total);
#pragma unroll
    for (int c = 0; c < C; ++c) excl.v[c] += carry.v[c];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int c = 0; c < C; ++c) {
        excl.v[c] += px[i][c];
        if (x0 + i < width) out[(x0 + i + 1) * C + c] = excl.v[c];
      }
    if (threadIdx.x == 0) {
#pragma unroll
      for (int c = 0; c < C; ++c) carry_shared.v[c] = carry.v[c] + total.v[c];
    }
    __syncthreads();
    carry = carry_shared;
    __syncthreads();
  }
}

// Column pass 1: inclusive scan down each column inside a tile of kTileRows table
// rows (rows 1..H); tile totals go to `tiles` [num_tiles][row_elems].
__global__ void column_tile_kernel(std::uint32_t* table, long long table_stride, int height,
                                   int row_elems, std::uint32_t* tiles) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int tile = blockIdx.y;
  if (i >= row_elems) return;
  const int y0 = 1 + tile * kTileRows, y1 = min(height + 1, y0 + kTileRows);
  std::uint32_t s = 0;
  for (int y = y0; y < y1; ++y) {
    std::uint32_t* p = table + y * table_stride + i;
    s += *p;
    *p = s;
  }
  tiles[static_cast<long long>(tile) * row_elems + i] = s;
}

// Column pass 2: exclusive scan of the tile totals of each column (in place).
__global__ void column_carry_kernel(std::uint32_t* tiles, int num_tiles, int row_elems) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= row_elems) return;
  std::uint32_t s = 0;
  for (int t = 0; t < num_tiles; ++t) {
    std::uint32_t* p = tiles + static_cast<long long>(t) * row_elems + i;
    const std::uint32_t v = *p;
    *p = s;
    s += v;
  }
}

// Column pass 3: add each tile's carry to its rows (tile 0 has none).
__global__ void column_add_kernel(std::uint32_t* table, long long table_stride, int height,
                                  int row_elems, const std::uint32_t* tiles) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = 1 + kTileRows + blockIdx.y;
  if (i >= row_elems || y > height) return;
  const int tile = (y - 1) / kTileRows;
  table[y * table_stride + i] += tiles[static_cast<long long>(tile) * row_elems + i];
}

// Mirrors borders() in extract.cpp op for op (no fused multiply-add).
__device__ long long border(double a, double step, int k) {
  return static_cast<long long>(
      floor(__dadd_rn(__dadd_rn(a, __dmul_rn(step, static_cast<double>(k))), 0.5)));
}

__device__ long long clampll(long long v, long long lo, long long hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// One block per patch. Shared layout: borders, then (P+1)^2 * C corner values when
// the patch is regular and they fit (use_shared), else outputs read global memory.
template <int C>
__global__ void extract_kernel(const DeviceTable* tables, const DeviceBox* boxes, int p,
                               bool use_shared, float* out) {
  extern __shared__ std::uint32_t corners[];
  __shared__ long long bx[kMaxPatchSize + 1], by[kMaxPatchSize + 1];
  __shared__ int regular, exact_fast;
  const DeviceBox box = boxes[blockIdx.x];
  const DeviceTable t = tables[box.image];
  const double step_x =
      __ddiv_rn(__dsub_rn(static_cast<double>(box.x1), static_cast<double>(box.x0)), p);
  const double step_y =
      __ddiv_rn(__dsub_rn(static_cast<double>(box.y1), static_cast<double>(box.y0)), p);
  for (int k = threadIdx.x; k <= p; k += blockDim.x) {
    bx[k] = border(box.x0, step_x, k);
    by[k] = border(box.y0, step_y, k);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int reg = 1;
    long long max_w = 0, max_h = 0;
    for (int k = 0; k < p; ++k) {
      if (bx[k + 1] <= bx[k] || by[k + 1] <= by[k]) reg = 0;
      const long long xr = max(bx[k + 1], bx[k] + 1), yr = max(by[k + 1], by[k] + 1);
      max_w = max(max_w, clampll(xr, 0, t.width) - clampll(bx[k], 0, t.width));
      max_h = max(max_h, clampll(yr, 0, t.height) - clampll(by[k], 0, t.height));
    }
    regular = reg;
    exact_fast = max_w * max_h <= kMaxFastCellPixels;
  }
  __syncthreads();
  const bool staged = use_shared && regular && exact_fast;
  if (staged) {
    const int n = (p + 1) * (p + 1) * C;
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
      const int c = idx % C, j = (idx / C) % (p + 1), i = idx / (C * (p + 1));
      const long long y = clampll(by[i], 0, t.height), x = clampll(bx[j], 0, t.width);
      corners[idx] = __ldg(t.data + y * t.stride + x * C + c);
    }
    __syncthreads();
  }
  const int n_out = C * p * p;
  float* dst = out + static_cast<long long>(blockIdx.x) * n_out;
  for (int o = threadIdx.x; o < n_out; o += blockDim.x) {
    const int k = o % p, r = (o / p) % p, c = o / (p * p);
    const long long xl = bx[k], xr = max(bx[k + 1], bx[k] + 1);
    const long long yl = by[r], yr = max(by[r + 1], by[r] + 1);
    const float inv_w = __fdiv_rn(1.0f, __ll2float_rn(xr - xl));
    const float inv_h = __fdiv_rn(1.0f, __ll2float_rn(yr - yl));
    float value;
    if (staged) {
      const int row = (p + 1) * C;
      const std::uint32_t s = corners[(r + 1) * row + (k + 1) * C + c] -
                              corners[(r + 1) * row + k * C + c] -
                              corners[r * row + (k + 1) * C + c] + corners[r * row + k * C + c];
      value = __fmul_rn(__uint2float_rn(s), __fmul_rn(inv_h, inv_w));
    } else {
      const long long cx0 = clampll(xl, 0, t.width), cx1 = clampll(xr, 0, t.width);
      const long long cy0 = clampll(yl, 0, t.height), cy1 = clampll(yr, 0, t.height);
      if (exact_fast) {
        const std::uint32_t* top = t.data + cy0 * t.stride;
        const std::uint32_t* bot = t.data + cy1 * t.stride;
        const std::uint32_t s = __ldg(bot + cx1 * C + c) - __ldg(bot + cx0 * C + c) -
                                __ldg(top + cx1 * C + c) + __ldg(top + cx0 * C + c);
        value = __fmul_rn(__uint2float_rn(s), __fmul_rn(inv_h, inv_w));
      } else {  // strips of <= kMaxExactBoxPixels, as IntegralImage::box_sum
        unsigned long long total = 0;
        if (cx1 > cx0 && cy1 > cy0) {
          const long long rows = max(1LL, 16843009LL / (cx1 - cx0));
          for (long long ya = cy0; ya < cy1; ya += rows) {
            const long long yb = min(cy1, ya + rows);
            const std::uint32_t* top = t.data + ya * t.stride;
            const std::uint32_t* bot = t.data + yb * t.stride;
            total += static_cast<std::uint32_t>(bot[cx1 * C + c] - bot[cx0 * C + c] -
                                                top[cx1 * C + c] + top[cx0 * C + c]);
          }
        }
        value = static_cast<float>(
            __ddiv_rn(static_cast<double>(total),
                      __dmul_rn(static_cast<double>(xr - xl), static_cast<double>(yr - yl))));
      }
    }
    dst[o] = value;
  }
}

}  // namespace

long long table_stride(int width, int channels) {
  return (static_cast<long long>(width + 1) * channels + 1 + 15) / 16 * 16;  // as the CPU table
}

std::size_t table_scratch_entries(int height, int width, int channels) {
  const std::size_t tiles = (height + kTileRows - 1) / kTileRows;
  return tiles * static_cast<std::size_t>(width + 1) * channels;
}

void launch_build_table(const std::uint8_t* image, int h, int w, int C, std::uint32_t* table,
                        long long stride, std::uint32_t* scratch, cudaStream_t stream) {
  const int row_elems = (w + 1) * C;
  const int num_tiles = (h + kTileRows - 1) / kTileRows;
  cudaMemsetAsync(table, 0, stride * sizeof(std::uint32_t), stream);  // row 0
  const long long image_stride = static_cast<long long>(w) * C;
  if (C == 3)
    row_scan_kernel<3><<<h, kScanThreads, 0, stream>>>(image, w, image_stride, table, stride);
  else
    row_scan_kernel<1><<<h, kScanThreads, 0, stream>>>(image, w, image_stride, table, stride);
  const unsigned cols = (row_elems + 255) / 256;
  column_tile_kernel<<<dim3(cols, num_tiles), 256, 0, stream>>>(table, stride, h, row_elems,
                                                                scratch);
  column_carry_kernel<<<cols, 256, 0, stream>>>(scratch, num_tiles, row_elems);
  if (h > kTileRows)
    column_add_kernel<<<dim3(cols, h - kTileRows), 256, 0, stream>>>(table, stride, h, row_elems,
                                                                     scratch);
}

void launch_extract(const DeviceTable* tables, const DeviceBox* boxes, int n, int p, int C,
                    float* out, cudaStream_t stream) {
  const std::size_t shared = static_cast<std::size_t>(p + 1) * (p + 1) * C * sizeof(std::uint32_t);
  const bool use_shared = shared <= 40 * 1024;
  const std::size_t dyn = use_shared ? shared : 0;
  if (C == 3)
    extract_kernel<3><<<n, kPatchThreads, dyn, stream>>>(tables, boxes, p, use_shared, out);
  else
    extract_kernel<1><<<n, kPatchThreads, dyn, stream>>>(tables, boxes, p, use_shared, out);
}

}  // namespace saccade::kernels::cuda::detail
