// CUDA kernels of the fused photometric augmentation (kernels/photometric.h): the per-pixel
// maps of photometric_ops.h, a block per patch with the patch's tiles in shared memory.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/photometric_ops.h"

namespace saccade::kernels::cuda::detail {
namespace {

namespace ph = photometric;

constexpr int kThreads = 256;

struct PatchOf {
  std::int64_t first;  // index of the patch's first value
  int view;
};

__device__ PatchOf patch_of(const PatchLayout& l, std::int64_t patch) {
  const std::int64_t row = patch / l.tokens;
  return {patch * l.channels * l.patch_size * l.patch_size, static_cast<int>(row % l.views)};
}

// partial[patch] = the patch's luminance summed after the jitter parts before contrast.
__global__ void luminance_sums(const std::uint8_t* in, PatchLayout l, const PatchAugment* views,
                               float* partial) {
  __shared__ float sums[kThreads];
  const PatchOf at = patch_of(l, blockIdx.x);
  const PatchAugment a = views[at.view];
  const int before = ph::contrast_place(a);
  const int plane = l.patch_size * l.patch_size;
  float s = 0;
  if (before < 4) {
    for (int i = threadIdx.x; i < plane; i += blockDim.x) {
      float px[3] = {0, 0, 0};
      for (int c = 0; c < l.channels; ++c) px[c] = in[at.first + c * plane + i];
      ph::jitter(px, l.channels, a, 0, before, 0);
      s += ph::luminance(px, l.channels);
    }
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// means[v] = view v's mean luminance, its patches summed in order in double.
__global__ void view_means(PatchLayout l, const float* partial, float* means) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= l.views) return;
  double sum = 0;
  for (int piece = 0; piece < l.pieces; ++piece)
    for (int t = 0; t < l.tokens; ++t)
      sum += partial[(static_cast<std::int64_t>(piece) * l.views + v) * l.tokens + t];
  const double count = static_cast<double>(l.pieces) * l.tokens * l.patch_size * l.patch_size;
  means[v] = static_cast<float>(sum / count);
}

__global__ void augment(const std::uint8_t* in, void* out, FloatType out_type, PatchLayout l,
                        const PatchAugment* views, Normalisation norm, const float* means) {
  extern __shared__ float tiles[];  // the patch, then the blur's intermediate
  __shared__ float taps[2 * kMaxPatchSize];
  const PatchOf at = patch_of(l, blockIdx.x);
  const PatchAugment a = views[at.view];
  const int p = l.patch_size, channels = l.channels, plane = p * p, values = channels * plane;
  float* tile = tiles;
  float* tmp = tiles + values;
  const float mean = ph::contrast_place(a) < 4 ? means[at.view] : 0;
  const bool gray = channels == 3 && a.grayscale != 0;
  for (int i = threadIdx.x; i < plane; i += blockDim.x) {
    float px[3] = {0, 0, 0};
    for (int c = 0; c < channels; ++c) px[c] = in[at.first + c * plane + i];
    ph::jitter(px, channels, a, 0, 4, mean);
    if (gray) px[0] = px[1] = px[2] = ph::gray_of(px[0], px[1], px[2]);
    for (int c = 0; c < channels; ++c) tile[c * plane + i] = px[c];
  }
  const int radius = ph::blur_radius(a.blur_sigma, p);  // the same for the whole block
  if (radius > 0 && threadIdx.x == 0) ph::blur_taps(a.blur_sigma, radius, taps);
  __syncthreads();
  if (radius > 0) {
    for (int i = threadIdx.x; i < values; i += blockDim.x) {  // along each row
      const int c = i / plane, r = (i % plane) / p, k = i % p;
      tmp[i] = ph::blur_at(tile + c * plane + r * p, 1, p, k, taps, radius);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < values; i += blockDim.x) {  // along each column
      const int c = i / plane, r = (i % plane) / p, k = i % p;
      tile[i] = ph::blur_at(tmp + c * plane + k, p, p, r, taps, radius);
    }
    __syncthreads();
  }
  const bool flip = a.flip != 0;
  for (int i = threadIdx.x; i < values; i += blockDim.x) {
    const int c = i / plane, r = (i % plane) / p, k = i % p;
    store_value(out, out_type, at.first + i,
                ph::finish(tile[c * plane + r * p + (flip ? p - 1 - k : k)], a, norm, c));
  }
}

}  // namespace

cudaError_t launch_augment_patches(const std::uint8_t* in, void* out, FloatType out_type,
                                   const PatchLayout& layout, const PatchAugment* views,
                                   const Normalisation& norm, float* scratch, cudaStream_t stream) {
  const std::int64_t patches = layout.rows() * layout.tokens;
  if (layout.views == 0 || patches == 0) return cudaSuccess;
  const std::size_t shared = 2 * static_cast<std::size_t>(layout.channels) * layout.patch_size *
                             layout.patch_size * sizeof(float);
  // Past the default 48 KB of dynamic and static (taps) shared memory: opt in, where the
  // device allows it.
  if (shared + sizeof(float) * 2 * kMaxPatchSize > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        augment, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (err != cudaSuccess) return err;
  }
  float* partial = scratch;
  float* means = scratch + patches;
  luminance_sums<<<static_cast<unsigned>(patches), kThreads, 0, stream>>>(in, layout, views,
                                                                          partial);
  view_means<<<(layout.views + 127) / 128, 128, 0, stream>>>(layout, partial, means);
  augment<<<static_cast<unsigned>(patches), kThreads, shared, stream>>>(in, out, out_type, layout,
                                                                        views, norm, means);
  return cudaGetLastError();
}

}  // namespace saccade::kernels::cuda::detail
