#include "kernels/geometry.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace saccade::kernels {
namespace {

void check_size(ImageSize size) {
  if (size.height <= 0)
    throw std::invalid_argument("size.height must be > 0, got " + std::to_string(size.height));
  if (size.width <= 0)
    throw std::invalid_argument("size.width must be > 0, got " + std::to_string(size.width));
}

void check_finite(float v, const char* name) {
  if (!std::isfinite(v))
    throw std::invalid_argument(std::string(name) + " must be finite, got " + std::to_string(v));
}

void check_grid(int g) {
  if (g <= 0) throw std::invalid_argument("g (grid side) must be > 0, got " + std::to_string(g));
}

}  // namespace

double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

Gaze image_extent(ImageSize size) {
  check_size(size);
  const double s = std::min(size.height, size.width);
  return {static_cast<float>(size.width / s), static_cast<float>(size.height / s)};
}

std::vector<PatchXYZ> multizoom_patches(Gaze gaze, int m, float z_min, float z_max) {
  check_finite(gaze.x, "gaze.x");
  check_finite(gaze.y, "gaze.y");
  check_finite(z_min, "z_min");
  check_finite(z_max, "z_max");
  if (m <= 0)
    throw std::invalid_argument("m (multi-zoom count) must be > 0, got " + std::to_string(m));
  std::vector<PatchXYZ> out(m);
  for (int i = 0; i < m; ++i) {
    const double t = m == 1 ? 0.0 : static_cast<double>(i) / (m - 1);
    out[i] = {gaze.x, gaze.y, static_cast<float>(z_min + (z_max - z_min) * t)};
  }
  return out;
}

std::vector<PatchXYZ> foveal_grid(Gaze gaze, float z, int g) {
  check_finite(gaze.x, "gaze.x");
  check_finite(gaze.y, "gaze.y");
  check_finite(z, "z");
  check_grid(g);
  const double side = std::exp2(-static_cast<double>(z));
  const double half = (g - 1) / 2.0;
  std::vector<PatchXYZ> out(static_cast<std::size_t>(g) * g);
  for (int v = 0; v < g; ++v)
    for (int u = 0; u < g; ++u)
      out[v * g + u] = {static_cast<float>(gaze.x + (u - half) * side),
                        static_cast<float>(gaze.y + (v - half) * side), z};
  return out;
}

float zoom_for_scale(int g, float scale) {
  check_grid(g);
  if (!(scale > 0) || !std::isfinite(scale))
    throw std::invalid_argument("scale must be finite and > 0, got " + std::to_string(scale));
  return static_cast<float>(std::log2(static_cast<double>(g)) -
                            std::log2(static_cast<double>(scale)) / 2);
}

GridView random_grid_view(ImageSize size, int g, float scale_min, float scale_max,
                          std::mt19937_64& rng) {
  check_grid(g);
  if (!(scale_min > 0) || !(scale_max >= scale_min) || !(scale_max <= 1) ||
      !std::isfinite(scale_min))
    throw std::invalid_argument("scale range must satisfy 0 < scale_min <= scale_max <= 1, got [" +
                                std::to_string(scale_min) + ", " + std::to_string(scale_max) + "]");
  const Gaze extent = image_extent(size);
  GridView view;
  view.grid = g;
  view.scale = static_cast<float>(scale_min + (scale_max - scale_min) * uniform01(rng));
  view.zoom = zoom_for_scale(g, view.scale);
  // Grid side in units = G * 2^-z = sqrt(scale) <= 1: it always fits the short side.
  const double half = g * std::exp2(-static_cast<double>(view.zoom)) / 2;
  const double cx = half + (extent.x - 2 * half) * uniform01(rng);
  const double cy = half + (extent.y - 2 * half) * uniform01(rng);
  view.centre = {static_cast<float>(cx), static_cast<float>(cy)};
  view.patches = foveal_grid(view.centre, view.zoom, g);
  return view;
}

GridView global_view(ImageSize size, std::mt19937_64& rng) {
  return random_grid_view(size, 16, 0.32f, 1.0f, rng);
}

GridView local_view(ImageSize size, std::mt19937_64& rng) {
  return random_grid_view(size, 7, 0.05f, 0.32f, rng);
}

GridView vit_full_grid(ImageSize size, int g) {
  check_grid(g);
  const Gaze extent = image_extent(size);
  GridView view;
  view.grid = g;
  view.zoom = static_cast<float>(std::log2(static_cast<double>(g)));
  view.scale = 1.0f;
  view.centre = {extent.x / 2, extent.y / 2};
  view.patches = foveal_grid(view.centre, view.zoom, g);
  return view;
}

Gaze sample_gaze(ImageSize size, std::mt19937_64& rng) {
  const Gaze extent = image_extent(size);
  return {static_cast<float>(extent.x * uniform01(rng)),
          static_cast<float>(extent.y * uniform01(rng))};
}

CropBox to_crop_box(const PatchXYZ& patch, ImageSize size, int image_index) {
  check_size(size);
  check_finite(patch.x, "patch.x");
  check_finite(patch.y, "patch.y");
  check_finite(patch.z, "patch.z");
  const double s = std::min(size.height, size.width);
  const double half = s * std::exp2(-static_cast<double>(patch.z)) / 2;
  const double cx = patch.x * s, cy = patch.y * s;
  return {static_cast<float>(cx - half), static_cast<float>(cy - half),
          static_cast<float>(cx + half), static_cast<float>(cy + half), image_index};
}

void to_crop_boxes(const std::vector<PatchXYZ>& patches, ImageSize size, int image_index,
                   std::vector<CropBox>* out) {
  out->reserve(out->size() + patches.size());
  for (const PatchXYZ& p : patches) out->push_back(to_crop_box(p, size, image_index));
}

}  // namespace saccade::kernels
