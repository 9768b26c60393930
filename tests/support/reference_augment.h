// A plain scalar implementation of a drawn view augmentation (dataloader/augment.h),
// one pixel at a time as DINOv2's torchvision transforms define it: the oracle
// the device implementation (workers/ssl/view_augment.h) is tested against.
#pragma once

#include <cstdint>
#include <vector>

#include "dataloader/augment.h"

namespace saccade::testing {

// Applies `augment` (photometric parts, then the flip of each patch's columns) in
// place to one view: `tokens` patches of `channels` x P x P floats on the 0..255 scale.
void reference_augment(float* patches, int64_t tokens, int channels, int patch_size,
                       const data::ViewAugment& augment);

// value = (value / 255 - mean[c]) / stdev[c].
void reference_normalise(float* patches, int64_t tokens, int channels, int patch_size,
                         const std::vector<float>& mean, const std::vector<float>& stdev);

}  // namespace saccade::testing
