// A PatchBatch seen as tensors, for the trainer and the probe.
#pragma once

#include <torch/torch.h>

#include "dataloader/views.h"

namespace saccade::ssl {

// A PatchBatch as tensors on `device`: patches [N, T, C, P, P], positions [N, T, 3].
struct ViewTensors {
  torch::Tensor patches, positions;
  ViewTensors rows(int64_t first, int64_t n) const {
    return {patches.narrow(0, first, n), positions.narrow(0, first, n)};
  }
};

// On the CPU the tensors alias the batch's buffers (keep it alive and unchanged).
inline ViewTensors to_tensors(const data::PatchBatch& pb, const torch::Device& device) {
  auto* patches = const_cast<float*>(pb.patches.data());  // from_blob does not write
  auto* positions = const_cast<float*>(pb.positions.data());
  ViewTensors t{
      torch::from_blob(patches, {pb.views, pb.tokens, pb.channels, pb.patch_size, pb.patch_size}),
      torch::from_blob(positions, {pb.views, pb.tokens, 3})};
  if (device.is_cpu()) return t;
  return {t.patches.to(device, /*non_blocking=*/true), t.positions.to(device, true)};
}

// The uint8 pixels [N, T, C, P, P] and positions [N, T, 3] of a PixelViews on
// `device` (on the CPU they alias the views' buffers).
inline ViewTensors to_tensors(const data::PixelViews& pv, const torch::Device& device) {
  auto* pixels = const_cast<uint8_t*>(pv.pixels.data());  // from_blob does not write
  auto* positions = const_cast<float*>(pv.positions.data());
  ViewTensors t{
      torch::from_blob(pixels, {pv.views, pv.tokens, pv.channels, pv.patch_size, pv.patch_size},
                       torch::kByte),
      torch::from_blob(positions, {pv.views, pv.tokens, 3})};
  if (device.is_cpu()) return t;
  return {t.patches.to(device, /*non_blocking=*/true), t.positions.to(device, true)};
}

}  // namespace saccade::ssl
