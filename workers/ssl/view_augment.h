// Photometric augmentation, flips and normalisation of views on the learner's
// device: the data plane ships uint8 patches with each view's drawn augmentation
// (dataloader/augment.h), and this turns them into the normalised float patches
// the model reads. Same maps as DINOv2's torchvision transforms, fused into one
// pass over the patches (kernels/photometric.h): CUDA kernels on a GPU, the same
// maps in a loop on the CPU device of a CPU build.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace saccade::ssl {

// pixels: uint8 [N, T, C, P, P] on the device (rows of `pieces`-row views, step-
// major: view a is rows a, A + a, ... with A = N / pieces); augment: A rows of
// data::kViewAugmentFloats floats on the host, one drawn augmentation per view;
// mean, stdev: C values. Returns [N, T, C, P, P] on the pixels' device:
// each view augmented as a whole (contrast takes the mean of all its rows), then
// (value / 255 - mean[c]) / stdev[c], as float32, or as bfloat16 with out_type
// kBFloat16 (rounded as LibTorch's conversion rounds). Throws std::invalid_argument on
// shapes that do not fit and on another out_type.
at::Tensor augment_views(const at::Tensor& pixels, const float* augment, int64_t pieces,
                         const std::vector<float>& mean, const std::vector<float>& stdev,
                         at::ScalarType out_type = at::kFloat);

}  // namespace saccade::ssl
