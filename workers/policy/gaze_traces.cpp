#include "workers/policy/gaze_traces.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <optional>
#include <random>
#include <stdexcept>
#include <tuple>

#include "dataloader/random.h"
#include "kernels/geometry.h"
#include "kernels/parallel.h"
#include "model/backbone.h"
#include "model/policy.h"
#include "workers/ssl/view_tensors.h"

namespace saccade::policy {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("run_traces: " + what);
}

// The gazes of one step [N, 2] on the CPU, and their log density under the policy.
std::pair<torch::Tensor, torch::Tensor> choose_gazes(model::GazePolicyImpl* policy,
                                                     const torch::Tensor& state,
                                                     const torch::Tensor& extent, int64_t t,
                                                     const TraceOptions& o,
                                                     std::vector<std::mt19937_64>& rngs) {
  const int64_t n = extent.size(0);
  if (o.source == GazeSource::kScan) {
    torch::Tensor gazes = torch::empty({n, 2});
    auto g = gazes.accessor<float, 2>();
    auto e = extent.accessor<float, 2>();
    for (int64_t i = 0; i < n; ++i) std::tie(g[i][0], g[i][1]) = scan_gaze(t, e[i][0], e[i][1]);
    return {gazes, torch::zeros({n})};
  }
  if (o.source == GazeSource::kRandom) {
    torch::Tensor gazes = torch::empty({n, 2});
    auto g = gazes.accessor<float, 2>();
    auto e = extent.accessor<float, 2>();
    for (int64_t i = 0; i < n; ++i) {  // uniform in [0, extent): sample_gaze's rule
      g[i][0] = static_cast<float>(kernels::uniform01(rngs[i])) * e[i][0];
      g[i][1] = static_cast<float>(kernels::uniform01(rngs[i])) * e[i][1];
    }
    return {gazes, torch::zeros({n})};
  }
  // The policy runs where the backbone is; its mixture is drawn from on the CPU,
  // so a seed gives the same gazes on any device.
  const model::GazePolicyImpl::Output out = policy->forward(state, extent.to(state.device()));
  const model::GaussianMixture pi(out.means.to(torch::kCPU, torch::kFloat32),
                                  out.logits.to(torch::kCPU, torch::kFloat32), o.std, extent);
  torch::Tensor gazes;
  if (o.source == GazeSource::kPolicySample) {
    torch::Tensor uniforms = torch::empty({n, 3}, torch::kFloat64);
    auto u = uniforms.accessor<double, 2>();
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) u[i][k] = kernels::uniform01(rngs[i]);
    gazes = pi.sample_from_uniforms(uniforms);
  } else {
    const torch::Tensor best = pi.logits().argmax(1).view({-1, 1, 1}).expand({-1, 1, 2});
    gazes = pi.means().gather(1, best).squeeze(1);
  }
  return {gazes, pi.log_prob(gazes)};
}

}  // namespace

torch::Tensor glimpse_code(int64_t n, int64_t n_state, int64_t width, int64_t t) {
  check(t >= 0 && t < width,
        fmt::format("a state-blind policy codes glimpse {} in a state of width {}", t, width));
  torch::Tensor code = torch::zeros({n, n_state, width});
  code.select(1, 0).select(1, t).fill_(1.0f);
  return code;
}

std::pair<float, float> scan_gaze(int64_t t, float ex, float ey) {
  // Cell (col, row) of the 3 x 3 grid; 4 is the centre.
  static constexpr int kOrder[9] = {4, 0, 1, 2, 3, 5, 6, 7, 8};
  const int cell = kOrder[t % 9];
  return {ex * (static_cast<float>(cell % 3) + 0.5f) / 3.0f,
          ey * (static_cast<float>(cell / 3) + 0.5f) / 3.0f};
}

Traces run_traces(model::FovealBackboneImpl& backbone, const probe::TaskHead& head,
                  model::GazePolicyImpl* policy, const std::vector<data::GlimpseCutter>& images,
                  const std::vector<int64_t>& labels, const TraceOptions& o) {
  const int64_t B = static_cast<int64_t>(images.size());
  check(B >= 1 && static_cast<int64_t>(labels.size()) == B,
        fmt::format("expected one label per image, got {} images and {} labels", B, labels.size()));
  check(o.steps >= 1 && o.group >= 1, "steps and group must be >= 1");
  check(policy != nullptr || !needs_policy(o.source), "the policy sources need a policy");
  check(o.image_seeds.empty() || static_cast<int64_t>(o.image_seeds.size()) == B,
        fmt::format("expected one seed per image, got {} for {} images", o.image_seeds.size(), B));
  head.check_fits(backbone.options().n_state, backbone.options().width, "run_traces");
  const int64_t classes = head.classes();
  for (int64_t label : labels)
    check(label >= 0 && label < classes,
          fmt::format("label {} outside the head's {} classes", label, classes));

  const int64_t G = o.group, N = B * G, T = o.steps;
  const torch::Device device = backbone.parameters().front().device();
  const data::ViewOptions& views = images.front().options();
  Traces tr;
  tr.extent = torch::empty({N, 2});
  std::vector<std::mt19937_64> rngs;  // per trace: foveal zooms, random gazes
  rngs.reserve(static_cast<size_t>(N));
  auto extent = tr.extent.accessor<float, 2>();
  for (int64_t n = 0; n < N; ++n) {
    extent[n][0] = images[n / G].extent_x();
    extent[n][1] = images[n / G].extent_y();
    const uint64_t image_seed = o.image_seeds.empty()
                                    ? data::mix_seed(o.seed, static_cast<uint64_t>(n / G))
                                    : o.image_seeds[static_cast<size_t>(n / G)];
    rngs.emplace_back(data::mix_seed(image_seed, static_cast<uint64_t>(n % G)));
  }
  const int64_t D = backbone.options().width, S = backbone.options().n_state;
  tr.states = torch::empty({T, N, S, D});
  tr.gazes = torch::empty({T, N, 2});
  tr.log_prob = torch::empty({T, N});
  tr.rewards = torch::empty({T, N});
  tr.correct = torch::empty({T, N}, torch::kBool);
  const torch::Tensor label_index =
      torch::tensor(labels, torch::kInt64).repeat_interleave(G).to(device);

  const bool backbone_training = backbone.is_training();
  const bool policy_training = policy != nullptr && policy->is_training();
  backbone.eval();
  if (policy != nullptr) policy->eval();
  torch::NoGradGuard no_grad;
  data::PatchBatch glimpse;
  glimpse.resize(N, views.glimpse_tokens(), views.channels, views.patch_size);
  // What the policy reads before glimpse 1. The backbone itself starts the sequence from
  // no state, as pretraining and the probe do: with memory tokens (or a state projection)
  // a zero state is not "no state", and glimpse 1 would see tokens it was never trained on.
  torch::Tensor state = backbone.initial_state(N);
  for (int64_t t = 0; t < T; ++t) {
    // What the policy reads, kept for the trainer to read it again.
    const torch::Tensor policy_input =
        o.state_blind ? glimpse_code(N, S, D, t).to(device) : state.to(torch::kFloat32);
    tr.states[t].copy_(policy_input.to(torch::kCPU));
    auto [gazes, log_prob] = choose_gazes(policy, policy_input, tr.extent, t, o, rngs);
    tr.gazes[t].copy_(gazes);
    tr.log_prob[t].copy_(log_prob);
    auto g = gazes.accessor<float, 2>();
    kernels::parallel_for(o.threads, static_cast<int>(N), [&](int n) {
      const float z = views.fovea_zoom_min + static_cast<float>(kernels::uniform01(rngs[n])) *
                                                 (views.fovea_zoom_max - views.fovea_zoom_min);
      images[n / G].cut(g[n][0], g[n][1], z, glimpse, n);
    });
    const ssl::ViewTensors v = ssl::to_tensors(glimpse, device);
    state = backbone.step(v.patches, v.positions, t == 0 ? torch::Tensor() : state).state;
    const torch::Tensor logits = head.logits(state);
    const torch::Tensor p_true =
        torch::softmax(logits, 1).gather(1, label_index.view({-1, 1})).squeeze(1);
    tr.rewards[t].copy_(p_true.to(torch::kCPU));
    tr.correct[t].copy_(logits.argmax(1).eq(label_index).to(torch::kCPU));
  }
  backbone.train(backbone_training);
  if (policy != nullptr) policy->train(policy_training);
  return tr;
}

std::vector<data::GlimpseCutter> load_glimpse_cutters(const data::Dataset& dataset,
                                                      const data::ViewOptions& views,
                                                      const std::vector<int64_t>& indices,
                                                      int threads, std::vector<int64_t>* labels) {
  std::vector<std::optional<data::GlimpseCutter>> slots(indices.size());
  labels->assign(indices.size(), -1);
  kernels::parallel_for(threads, static_cast<int>(indices.size()), [&](int i) {
    const data::Sample s = data::get_or_next_good(dataset, indices[i]);
    slots[i].emplace(views, s.image);
    (*labels)[i] = s.label;
  });
  std::vector<data::GlimpseCutter> cutters;
  cutters.reserve(slots.size());
  for (auto& slot : slots) cutters.push_back(std::move(*slot));
  return cutters;
}

std::vector<double> step_accuracy(const Traces& traces) {
  const torch::Tensor a = traces.correct.to(torch::kFloat64).mean(1);
  return std::vector<double>(a.data_ptr<double>(), a.data_ptr<double>() + a.numel());
}

}  // namespace saccade::policy
