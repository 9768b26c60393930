// Launchers of the CUDA kernels (extract_cuda.cu). C++17 and span-free, because nvcc
// compiles .cu files as C++17 here; cuda_extractor.cpp (C++20) wraps them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/layer_norm.h"
#include "kernels/photometric.h"

namespace saccade::kernels::cuda::detail {

// Same constants as kernels/extract.h (static_assert'ed in cuda_extractor.cpp).
inline constexpr long long kMaxFastCellPixels = 8421504;
inline constexpr int kMaxPatchSize = 128;

struct DeviceTable {
  const std::uint32_t* data;  // device memory, (height + 1) rows of `stride` entries
  long long stride;
  int height, width;
};

// Layout-identical to kernels::CropBox.
struct DeviceBox {
  float x0, y0, x1, y1;
  int image;
};

// Table row stride (entries) for a width x channels image, as the CPU table's.
long long table_stride(int width, int channels);
// Scratch entries build_table needs for an image of this size.
std::size_t table_scratch_entries(int height, int width, int channels);

// Builds the uint32 wrapping table of a device image (rows of w * c bytes, packed).
void launch_build_table(const std::uint8_t* image, int height, int width, int channels,
                        std::uint32_t* table, long long stride, std::uint32_t* scratch,
                        cudaStream_t stream);

// Patches [n, channels, p, p] into device memory `out`.
void launch_extract(const DeviceTable* tables, const DeviceBox* boxes, int n, int p, int channels,
                    float* out, cudaStream_t stream);

// The fused photometric augmentation (kernels/photometric.h) queued on `stream`: per-patch
// luminance sums into scratch, per-view means after them, then one block per patch. Returns
// the first CUDA error (cudaErrorInvalidValue when a patch's two tiles, 2 * C * P * P floats,
// exceed the block shared memory this device allows).
cudaError_t launch_augment_patches(const std::uint8_t* in, void* out, FloatType out_type,
                                   const PatchLayout& layout, const PatchAugment* views,
                                   const Normalisation& norm, float* scratch, cudaStream_t stream);

// The fused residual add + LayerNorm (kernels/layer_norm.h), queued on `stream`; backward
// leaves per-block partial sums in scratch (add_norm_scratch_floats) and adds them after.
// Return the first CUDA error.
std::size_t add_norm_scratch_floats(long long rows, int width);
cudaError_t launch_add_norm_forward(const NormShape& shape, const AddNormForward& f, float eps,
                                    cudaStream_t stream);
cudaError_t launch_add_norm_backward(const NormShape& shape, const AddNormBackward& b,
                                     float* scratch, cudaStream_t stream);

}  // namespace saccade::kernels::cuda::detail
