// Geometry of every view, in image-relative units: the image's SHORT side is 1,
// origin at the top-left corner, x right, y down; so x in [0, W / min(H, W)] and
// y in [0, H / min(H, W)]. A square patch at zoom z has side 2^-z units
// (min(H, W) / 2^z pixels). A patch is its centre and zoom (x, y, z), which is also
// what the model's positional embedding eats. Pure functions; the random ones take
// the caller's generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/extract.h"

namespace saccade::kernels {

struct ImageSize {
  int height = 0;
  int width = 0;
};

// One patch: centre (x, y) and zoom z in image-relative units.
struct PatchXYZ {
  float x = 0, y = 0, z = 0;
};

struct Gaze {
  float x = 0, y = 0;
};

// A grid view: its G x G patches (row-major: index v * G + u) and how it was drawn.
struct GridView {
  int grid = 0;     // G
  float zoom = 0;   // z of every patch
  float scale = 0;  // grid area / short side^2 = G^2 / 4^z
  Gaze centre;      // grid centre
  std::vector<PatchXYZ> patches;
};

// Extent of an image in units: {W / min(H, W), H / min(H, W)} as (x, y).
// Throws std::invalid_argument when a side is not positive.
Gaze image_extent(ImageSize size);

// M concentric patches at `gaze`, z_i = linspace(z_min, z_max, M) (z_min when M = 1).
// Paper: z in linspace(0, 5, M).
std::vector<PatchXYZ> multizoom_patches(Gaze gaze, int m, float z_min = 0.0f, float z_max = 5.0f);

// G x G patches of zoom z centred at `gaze` (paper appendix B):
// x_{u,v} = x_c + (u - (G-1)/2) 2^-z, y_{u,v} = y_c + (v - (G-1)/2) 2^-z; index v*G + u.
std::vector<PatchXYZ> foveal_grid(Gaze gaze, float z, int g);

// Zoom for which a G x G grid covers `scale` of the unit square: log2(G) - log2(scale)/2.
float zoom_for_scale(int g, float scale);

// A random-resized-crop view as a foveal grid: area scale uniform in
// [scale_min, scale_max] (relative to short side^2), centre uniform such that the
// grid stays inside the image.
GridView random_grid_view(ImageSize size, int g, float scale_min, float scale_max,
                          std::mt19937_64& rng);
// DINOv2's views: global G = 16, scale in [0.32, 1]; local G = 7, scale in [0.05, 0.32].
GridView global_view(ImageSize size, std::mt19937_64& rng);
GridView local_view(ImageSize size, std::mt19937_64& rng);
// ViT mode: G x G (16) grid of zoom log2(G), centred, covering the short side.
GridView vit_full_grid(ImageSize size, int g = 16);

// A gaze uniform inside the image.
Gaze sample_gaze(ImageSize size, std::mt19937_64& rng);

// The pixel crop of a patch of image `image_index` (its size is `size`).
CropBox to_crop_box(const PatchXYZ& patch, ImageSize size, int image_index = 0);
void to_crop_boxes(const std::vector<PatchXYZ>& patches, ImageSize size, int image_index,
                   std::vector<CropBox>* out);  // appends

// Uniform double in [0, 1) from 53 bits of the generator (identical on every platform).
double uniform01(std::mt19937_64& rng);

}  // namespace saccade::kernels
