// The straightforward peer of integral-image extraction: cut each crop out of the
// image (zero-padded where it leaves the image) and resize it with OpenCV's
// INTER_AREA. Same call shape and output as extract_patches; a test oracle and the
// benchmark's baseline. Its cost grows with the crop's pixel count.
#pragma once

#include <span>

#include "kernels/extract.h"
#include "kernels/integral_image.h"

namespace saccade::kernels {

struct CropResizeOptions {
  // false: resize the uint8 crop (what a data loader does; results rounded to
  // integers). true: convert the crop to float first (an oracle without rounding).
  bool float_crop = false;
  int num_threads = 1;  // threads over boxes; OpenCV's own threading is not changed
};

// Crop borders are rounded to the nearest pixel (as in extract_patches); a crop
// narrower than one pixel becomes one pixel. Output [N, C, P, P] float32, 0..255.
void crop_resize_patches(std::span<const ImageView> images, std::span<const CropBox> boxes,
                         int patch_size, float* out, const CropResizeOptions& options = {});

}  // namespace saccade::kernels
