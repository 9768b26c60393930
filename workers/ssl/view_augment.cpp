#include "workers/ssl/view_augment.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "dataloader/augment.h"
#include "workers/ssl/host_to_device.h"

namespace saccade::ssl {
namespace {

namespace F = torch::nn::functional;

// The views of the set (dim 0 of x) that take one map, and their per-view value.
struct Group {
  std::vector<int64_t> views;
  std::vector<float> values;
};

// Runs `map` on the views of `group` of x [A, T', C, P, P] and writes them back;
// `values` reach it as a float tensor [n, 1, 1, 1, 1] on x's device.
template <class Map>
void apply(torch::Tensor& x, const Group& group, Map&& map) {
  if (group.views.empty()) return;
  const auto n = static_cast<int64_t>(group.views.size());
  const torch::Tensor values = host_to_device(group.values, x.device()).view({n, 1, 1, 1, 1});
  if (n == x.size(0)) {  // every view, in order: no gather
    x = map(x, values);
    return;
  }
  const torch::Tensor index = host_to_device(group.views, x.device());
  x.index_copy_(0, index, map(x.index_select(0, index), values));
}

torch::Tensor gray_of(const torch::Tensor& x) {  // [n, T', 3, P, P] -> [n, T', 1, P, P]
  return 0.299f * x.narrow(2, 0, 1) + 0.587f * x.narrow(2, 1, 1) + 0.114f * x.narrow(2, 2, 1);
}

torch::Tensor blend(const torch::Tensor& x, const torch::Tensor& f, const torch::Tensor& other) {
  return (f * x + (1 - f) * other).clamp(0, 255);
}

// torchvision's adjust_hue: RGB -> HSV, rotate the hue by `shift` turns, -> RGB.
torch::Tensor rotate_hue(const torch::Tensor& x, const torch::Tensor& shift) {
  const torch::Tensor r = x.select(2, 0), g = x.select(2, 1), b = x.select(2, 2);
  const torch::Tensor s5 = shift.view({-1, 1, 1, 1});
  const torch::Tensor mx = torch::max(r, torch::max(g, b)), mn = torch::min(r, torch::min(g, b));
  const torch::Tensor chroma = mx - mn;
  torch::Tensor h = torch::where(mx == r, (g - b) / chroma,
                                 torch::where(mx == g, 2 + (b - r) / chroma, 4 + (r - g) / chroma));
  h = h / 6 + s5;
  h = h - h.floor();
  const torch::Tensor s = chroma / mx, hh = h * 6;
  const torch::Tensor sector = hh.floor().fmod(6).to(torch::kLong).unsqueeze(0);
  const torch::Tensor frac = hh - hh.floor();
  const torch::Tensor p = mx * (1 - s), q = mx * (1 - s * frac), t = mx * (1 - s * (1 - frac));
  auto pick = [&](std::initializer_list<torch::Tensor> by_sector, const torch::Tensor& before) {
    const torch::Tensor v = torch::stack(std::vector<torch::Tensor>(by_sector), 0)
                                .gather(0, sector.clamp(0, 5))
                                .squeeze(0);
    return torch::where(chroma > 0, v, before);  // gray pixels keep their value
  };
  return torch::stack(
      {pick({mx, q, p, p, t, mx}, r), pick({t, mx, mx, q, p, p}, g), pick({p, p, t, mx, mx, q}, b)},
      2);
}

// Gaussian blur inside each P x P patch (borders replicated), sigma per view.
torch::Tensor blur(const torch::Tensor& x, const std::vector<float>& sigmas) {
  const int64_t n = x.size(0), p = x.size(-1);
  auto radius_of = [&](float sigma) {
    return std::min<int64_t>(p - 1, static_cast<int64_t>(std::ceil(3 * sigma)));
  };
  int64_t r = 0;
  for (float s : sigmas) r = std::max(r, radius_of(s));
  if (r == 0) return x;
  const int64_t taps = 2 * r + 1;
  std::vector<float> weights(static_cast<size_t>(n * taps), 0.0f);
  for (int64_t v = 0; v < n; ++v) {  // each view's own radius; taps beyond it weigh 0
    const float sigma = sigmas[static_cast<size_t>(v)];
    const int64_t own = radius_of(sigma);
    if (own == 0) {
      weights[static_cast<size_t>(v * taps + r)] = 1;
      continue;
    }
    float total = 0;
    for (int64_t i = -own; i <= own; ++i)
      total += weights[static_cast<size_t>(v * taps + r + i)] =
          std::exp(-0.5f * static_cast<float>(i * i) / (sigma * sigma));
    for (int64_t i = -own; i <= own; ++i) weights[static_cast<size_t>(v * taps + r + i)] /= total;
  }
  const torch::Tensor kernel = host_to_device(weights, x.device()).view({n, 1, 1, taps});
  const torch::Tensor replicate =
      torch::arange(-r, p + r, torch::TensorOptions().dtype(torch::kLong).device(x.device()))
          .clamp(0, p - 1);
  // Along the last axis: each view one channel of a tall image [1, n, T'·C·P, P + 2r].
  auto along_rows = [&](const torch::Tensor& y) {
    const torch::Tensor padded = y.index_select(-1, replicate).reshape({1, n, -1, p + 2 * r});
    return F::conv2d(padded, kernel, F::Conv2dFuncOptions().groups(n)).view(y.sizes());
  };
  const torch::Tensor rows = along_rows(x.contiguous());
  return along_rows(rows.transpose(-1, -2).contiguous()).transpose(-1, -2).contiguous();
}

}  // namespace

at::Tensor augment_views(const at::Tensor& pixels, const float* augment, int64_t pieces,
                         const std::vector<float>& mean, const std::vector<float>& stdev) {
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
  // Views as wholes: [A, pieces * T, C, P, P].
  torch::Tensor x = pixels.to(torch::kFloat)
                        .view({pieces, views, t, c, p, p})
                        .transpose(0, 1)
                        .reshape({views, pieces * t, c, p, p});

  // Group the views by the map each step applies to them.
  std::array<std::array<Group, 4>, 4> jitter;  // [place in the order][part]
  Group grayscale, blurred, solarized, flipped;
  for (int64_t v = 0; v < views; ++v) {
    const float* a = augment + v * data::kViewAugmentFloats;
    if (a[data::kAugJitter] != 0) {
      const float factor[4] = {a[data::kAugBrightness], a[data::kAugContrast],
                               a[data::kAugSaturation], a[data::kAugHue]};
      for (int place = 0; place < 4; ++place) {
        const auto part = static_cast<int>(a[data::kAugOrder + place]);
        if (c == 1 && (part == data::kSaturation || part == data::kHue)) continue;
        jitter[place][part].views.push_back(v);
        jitter[place][part].values.push_back(factor[part]);
      }
    }
    const auto add_if = [&](Group& g, float value, bool on) {
      if (!on) return;
      g.views.push_back(v);
      g.values.push_back(value);
    };
    add_if(grayscale, 0, c == 3 && a[data::kAugGrayscale] != 0);
    add_if(blurred, a[data::kAugBlurSigma], a[data::kAugBlurSigma] > 0);
    add_if(solarized, 0, a[data::kAugSolarize] != 0);
    add_if(flipped, 0, a[data::kAugFlip] != 0);
  }

  auto luminance = [&](const torch::Tensor& y) { return c == 3 ? gray_of(y) : y; };
  for (const auto& place : jitter) {
    apply(x, place[data::kBrightness],
          [](const torch::Tensor& y, const torch::Tensor& f) { return (y * f).clamp(0, 255); });
    apply(x, place[data::kContrast], [&](const torch::Tensor& y, const torch::Tensor& f) {
      return blend(y, f, luminance(y).mean({1, 2, 3, 4}, /*keepdim=*/true));
    });
    apply(x, place[data::kSaturation],
          [&](const torch::Tensor& y, const torch::Tensor& f) { return blend(y, f, gray_of(y)); });
    apply(x, place[data::kHue], rotate_hue);
  }
  apply(x, grayscale, [](const torch::Tensor& y, const torch::Tensor&) {
    return gray_of(y).expand(y.sizes()).contiguous();
  });
  apply(x, blurred,
        [&](const torch::Tensor& y, const torch::Tensor&) { return blur(y, blurred.values); });
  apply(x, solarized, [](const torch::Tensor& y, const torch::Tensor&) {
    return torch::where(y >= 128, 255 - y, y);
  });
  apply(x, flipped, [](const torch::Tensor& y, const torch::Tensor&) { return y.flip({-1}); });

  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (size_t i = 0; i < scale.size(); ++i) {
    scale[i] = 1.0f / (255.0f * stdev[i]);
    shift[i] = mean[i] / stdev[i];
  }
  x = x * host_to_device(scale, x.device()).view({c, 1, 1}) -
      host_to_device(shift, x.device()).view({c, 1, 1});
  if (pieces == 1) return x;
  return x.view({views, pieces, t, c, p, p}).transpose(0, 1).reshape({n, t, c, p, p});
}

}  // namespace saccade::ssl
