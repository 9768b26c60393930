// A PatchBatch seen as tensors, for the trainer and the probe.
#pragma once

#include <torch/torch.h>

#include "dataloader/views.h"
#include "workers/ssl/host_to_device.h"

namespace saccade::ssl {

// A PatchBatch as tensors on `device`: patches [N, T, C, P, P], positions [N, T, 3].
struct ViewTensors {
  torch::Tensor patches, positions;
  ViewTensors rows(int64_t first, int64_t n) const {
    return {patches.narrow(0, first, n), positions.narrow(0, first, n)};
  }
};

namespace detail {
// Patches [N, T, C, P, P] of `dtype` at `values` (none, undefined, without `with_patches`)
// and positions
// [N, T, 3] as tensors on `device`; on the CPU they alias the buffers (from_blob does not
// write).
inline ViewTensors view_tensors(bool with_patches, const void* values, torch::ScalarType dtype,
                                int64_t n, int64_t t, int64_t c, int64_t p, const float* positions,
                                const torch::Device& device) {
  ViewTensors out;
  if (with_patches)
    out.patches = torch::from_blob(const_cast<void*>(values), {n, t, c, p, p}, dtype);
  out.positions = torch::from_blob(const_cast<float*>(positions), {n, t, 3});
  if (device.is_cpu()) return out;
  if (out.patches.defined()) out.patches = out.patches.to(device, /*non_blocking=*/true);
  out.positions = out.positions.to(device, /*non_blocking=*/true);
  return out;
}
}  // namespace detail

// A PatchBatch's normalised float patches and positions (keep it alive and unchanged).
inline ViewTensors to_tensors(const data::PatchBatch& pb, const torch::Device& device) {
  return detail::view_tensors(true, pb.patches.data(), torch::kFloat, pb.views, pb.tokens,
                              pb.channels, pb.patch_size, pb.positions.data(), device);
}

// A PixelViews' uint8 pixels and positions; no patches when the learner cuts them (the
// views carry boxes, not pixels).
inline ViewTensors to_tensors(const data::PixelViews& pv, const torch::Device& device) {
  return detail::view_tensors(pv.boxes.empty(), pv.pixels.data(), torch::kByte, pv.views, pv.tokens,
                              pv.channels, pv.patch_size, pv.positions.data(), device);
}

}  // namespace saccade::ssl
