// The strongest O(1)-per-patch peer of the integral image: an image pyramid built
// once (cv::pyrDown: 5x5 Gaussian, then every other pixel), each patch resampled
// bilinearly from the level whose pixel is nearest the patch's cell size. Cheaper
// to build and smaller than a summed-area table, but not an exact box average: the
// benchmark measures by how much (bench/kernels/extract_bench.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "kernels/extract.h"
#include "kernels/integral_image.h"

namespace saccade::kernels {

class ImagePyramid {
 public:
  ImagePyramid();
  ~ImagePyramid();
  ImagePyramid(ImagePyramid&&) noexcept;
  ImagePyramid& operator=(ImagePyramid&&) noexcept;

  // Level 0 is the image itself, not copied (the caller keeps it alive as long as the
  // pyramid, as for any ImageView); level l + 1 = pyrDown(level l), down to a level
  // whose short side is <= `min_side`. Throws std::invalid_argument on a bad image.
  static ImagePyramid build(const ImageView& image, int min_side = 1);
  // Rebuilds in place for a new image, reusing the levels' storage where a level keeps its
  // size (no page faults: what a loader does per image, as IntegralImage::rebuild).
  void rebuild(const ImageView& image, int min_side = 1);

  int levels() const;
  int channels() const;
  std::size_t bytes() const;  // of all levels, the image's included (what extraction needs)

  // Level l (0 = the image): 8-bit HWC pixels (owned by the pyramid from level 1); pixel i of
  // level l is centred at level-0 coordinate i * 2^l + 0.5 (pyrDown keeps every
  // other pixel of the blurred level above, starting with pixel 0).
  ImageView level(int l) const;
  // Level whose pixel side (2^l level-0 pixels) is nearest, in log2, to `cell_pixels`.
  int level_for(double cell_pixels) const;

 private:
  struct Levels;                    // the cv::Mat levels (OpenCV stays out of this header)
  std::unique_ptr<Levels> levels_;  // owned
};

// Same call shape and output as extract_patches ([N, C, P, P] float32, 0..255, one
// image per box): cell (i, j) of a box is the bilinear sample, at the cell's centre,
// of the level nearest the box's cell size (geometric mean of its width and height).
void pyramid_patches(std::span<const ImagePyramid> pyramids, std::span<const CropBox> boxes,
                     int patch_size, float* out, int num_threads = 1);

}  // namespace saccade::kernels
