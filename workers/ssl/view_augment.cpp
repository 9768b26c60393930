#include "workers/ssl/view_augment.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <c10/core/DeviceGuard.h>

#include <cstddef>
#include <stdexcept>

#include "dataloader/augment.h"
#include "kernels/photometric.h"
#include "model/device_stream.h"
#include "workers/ssl/host_to_device.h"

namespace saccade::ssl {
namespace {

// A row of data::kViewAugmentFloats floats is a kernels::PatchAugment: the same columns.
using kernels::PatchAugment;
static_assert(sizeof(PatchAugment) == data::kViewAugmentFloats * sizeof(float));
static_assert(offsetof(PatchAugment, jitter) == data::kAugJitter * sizeof(float));
static_assert(offsetof(PatchAugment, order) == data::kAugOrder * sizeof(float));
static_assert(offsetof(PatchAugment, brightness) == data::kAugBrightness * sizeof(float));
static_assert(offsetof(PatchAugment, contrast) == data::kAugContrast * sizeof(float));
static_assert(offsetof(PatchAugment, saturation) == data::kAugSaturation * sizeof(float));
static_assert(offsetof(PatchAugment, hue) == data::kAugHue * sizeof(float));
static_assert(offsetof(PatchAugment, grayscale) == data::kAugGrayscale * sizeof(float));
static_assert(offsetof(PatchAugment, blur_sigma) == data::kAugBlurSigma * sizeof(float));
static_assert(offsetof(PatchAugment, solarize) == data::kAugSolarize * sizeof(float));
static_assert(offsetof(PatchAugment, flip) == data::kAugFlip * sizeof(float));
static_assert(kernels::kJitterBrightness == data::kBrightness &&
              kernels::kJitterContrast == data::kContrast &&
              kernels::kJitterSaturation == data::kSaturation && kernels::kJitterHue == data::kHue);

}  // namespace

at::Tensor augment_views(const at::Tensor& pixels, const float* augment, int64_t pieces,
                         const std::vector<float>& mean, const std::vector<float>& stdev,
                         at::ScalarType out_type) {
  if (out_type != torch::kFloat && out_type != torch::kBFloat16)
    throw std::invalid_argument(fmt::format(
        "augment_views: out_type must be Float or BFloat16, got {}", c10::toString(out_type)));
  const kernels::FloatType output =
      out_type == torch::kBFloat16 ? kernels::FloatType::kBFloat16 : kernels::FloatType::kFloat32;
  if (pixels.dim() != 5 || pixels.scalar_type() != torch::kByte || pieces < 1 ||
      pixels.size(0) % pieces != 0 || pixels.size(3) != pixels.size(4))
    throw std::invalid_argument(fmt::format(
        "augment_views: expected uint8 pixels [N, T, C, P, P] with N a multiple of {} rows per "
        "view, got {} of {} dimensions",
        pieces, c10::toString(pixels.scalar_type()), pixels.dim()));
  const int64_t n = pixels.size(0), t = pixels.size(1), c = pixels.size(2), p = pixels.size(3);
  const int64_t views = n / pieces;
  if (static_cast<int64_t>(mean.size()) != c || static_cast<int64_t>(stdev.size()) != c)
    throw std::invalid_argument(fmt::format(
        "augment_views: {} channels but {} means and {} deviations", c, mean.size(), stdev.size()));
  kernels::PatchLayout layout;
  layout.views = static_cast<int>(views);
  layout.pieces = static_cast<int>(pieces);
  layout.tokens = static_cast<int>(t);
  layout.channels = static_cast<int>(c);
  layout.patch_size = static_cast<int>(p);
  kernels::validate_patch_layout(layout);
  const kernels::Normalisation norm =
      kernels::normalisation(mean.data(), stdev.data(), static_cast<int>(c));
  const torch::Tensor in = pixels.contiguous();
  torch::Tensor out = torch::empty(pixels.sizes(), pixels.options().dtype(out_type));
  if (!pixels.is_cuda()) {
    kernels::augment_patches(in.data_ptr<uint8_t>(), out.data_ptr(), output, layout,
                             reinterpret_cast<const PatchAugment*>(augment), norm);
    return out;
  }
  const c10::DeviceGuard on(pixels.device());
  const torch::Tensor rows = host_to_device(
      std::vector<float>(augment, augment + views * data::kViewAugmentFloats), pixels.device());
  const torch::Tensor scratch =
      torch::empty({static_cast<int64_t>(kernels::augment_scratch_floats(layout))},
                   pixels.options().dtype(torch::kFloat));
  kernels::augment_patches_cuda(in.data_ptr<uint8_t>(), out.data_ptr(), output, layout,
                                reinterpret_cast<const PatchAugment*>(rows.data_ptr<float>()), norm,
                                scratch.data_ptr<float>(), model::current_stream(pixels.device()));
  return out;
}

}  // namespace saccade::ssl
