#include "workers/probe/probe.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "dataloader/random.h"
#include "kernels/parallel.h"
#include "model/backbone.h"
#include "workers/ssl/view_tensors.h"

namespace saccade::probe {
namespace {

// Seed of image i's gazes: one SplitMix64 step apart per image, so that
// neighbouring images differ.
uint64_t image_seed(uint64_t seed, int64_t index) {
  return data::splitmix64(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index));
}

}  // namespace

ProbeFeatures extract_probe_features(model::FovealBackboneImpl& backbone,
                                     const data::Dataset& dataset, const data::ViewOptions& views,
                                     const FeatureOptions& o) {
  if (o.glimpses < 0 || o.batch_size < 1 || o.max_images < 0)
    throw std::invalid_argument(
        "extract_probe_features: glimpses must be >= 0 and batch_size >= 1");
  const int64_t n = o.max_images > 0 ? std::min(o.max_images, dataset.size()) : dataset.size();
  if (n < 1) throw std::invalid_argument("extract_probe_features: the dataset is empty");
  const int64_t width = backbone.options().width;
  ProbeFeatures f;
  f.vit = torch::empty({n, width});
  f.steps = torch::empty({o.glimpses, n, width});
  f.labels = torch::empty({n}, torch::kInt64);
  const int64_t skipped_before = dataset.stats().skipped_corrupt();
  const torch::Device device = backbone.parameters().front().device();
  const bool was_training = backbone.is_training();
  backbone.eval();
  torch::NoGradGuard no_grad;
  data::EvalBatch batch;
  for (int64_t first = 0; first < n; first += o.batch_size) {
    const int64_t b = std::min(o.batch_size, n - first);
    batch.allocate(views, b, o.glimpses);
    kernels::parallel_for(o.threads, static_cast<int>(b), [&](int slot) {
      const data::Sample s = data::get_or_next_good(dataset, first + slot);
      data::make_eval_views(views, s.image, image_seed(o.seed, first + slot), slot, batch);
      batch.labels[static_cast<size_t>(slot)] = s.label;
    });
    const ssl::ViewTensors vit_views = ssl::to_tensors(batch.vit, device);
    if (o.pixels) {
      if (first == 0) f.pixels = torch::empty({n, vit_views.patches[0].numel()});
      f.pixels.narrow(0, first, b).copy_(vit_views.patches.reshape({b, -1}).cpu());
    }
    const model::StepOutput vit_out = backbone.step(vit_views.patches, vit_views.positions);
    const torch::Tensor& vit_state = vit_out.state;
    f.vit.narrow(0, first, b).copy_(vit_state.select(1, 0).to(torch::kCPU, torch::kFloat32));
    if (o.all_states) {
      if (first == 0) {
        f.vit_all_states = torch::empty({n, vit_state[0].numel()});
        f.steps_all_states = torch::empty({o.glimpses, n, vit_state[0].numel()});
      }
      f.vit_all_states.narrow(0, first, b).copy_(vit_state.reshape({b, -1}).cpu());
    }
    if (o.patch_mean) {
      if (first == 0) {
        f.vit_patch_mean = torch::empty({n, width});
        f.steps_patch_mean = torch::empty({o.glimpses, n, width});
      }
      f.vit_patch_mean.narrow(0, first, b)
          .copy_(vit_out.patch_tokens.mean(1).to(torch::kCPU, torch::kFloat32));
    }
    const ssl::ViewTensors seq = ssl::to_tensors(batch.seq, device);
    torch::Tensor state, patch_sum;         // patch_sum: the glimpses' mean patch tokens, summed
    for (int k = 0; k < o.glimpses; ++k) {  // step-major: glimpse k of the batch is one slice
      const ssl::ViewTensors glimpse = seq.rows(k * b, b);
      model::StepOutput out = backbone.step(glimpse.patches, glimpse.positions, state);
      state = out.state;
      if (o.patch_mean) {  // every glimpse has as many patches: the mean of means is the mean
        const torch::Tensor m = out.patch_tokens.mean(1).to(torch::kFloat32);
        patch_sum = k == 0 ? m : patch_sum + m;
        f.steps_patch_mean[k].narrow(0, first, b).copy_((patch_sum / (k + 1)).cpu());
      }
      f.steps[k].narrow(0, first, b).copy_(state.select(1, 0).to(torch::kCPU, torch::kFloat32));
      if (o.all_states)
        f.steps_all_states[k].narrow(0, first, b).copy_(state.reshape({b, -1}).cpu());
    }
    f.labels.narrow(0, first, b).copy_(torch::from_blob(batch.labels.data(), {b}, torch::kInt64));
    if (o.on_progress) o.on_progress();
  }
  backbone.train(was_training);
  f.skipped_corrupt = dataset.stats().skipped_corrupt() - skipped_before;
  return f;
}

at::Tensor mean_over_glimpses(const at::Tensor& steps) {
  if (!steps.defined() || steps.dim() != 3)
    throw std::invalid_argument("mean_over_glimpses: expected [K, N, D] glimpse features");
  const at::Tensor counts =
      torch::arange(1, steps.size(0) + 1, steps.options()).reshape({-1, 1, 1});
  return steps.cumsum(0) / counts;
}

ModeScores evaluate_view(const at::Tensor& train, const at::Tensor& train_labels,
                         const at::Tensor& val, const at::Tensor& val_labels, int64_t classes,
                         const EvaluationOptions& o, LinearClassifier* head) {
  ModeScores scores;
  scores.knn = knn_accuracy(train, train_labels, val, val_labels, classes, o.knn);
  LinearClassifier fitted = fit_linear_probe(train.unsqueeze(0), train_labels, classes, o.linear);
  scores.linear = linear_accuracy(val, val_labels, fitted.weight, fitted.bias);
  if (head) *head = std::move(fitted);
  return scores;
}

BackboneEvaluation evaluate_backbone(const ProbeFeatures& train, const ProbeFeatures& val,
                                     int64_t classes, const EvaluationOptions& o,
                                     const BackboneEvaluation* vit_from) {
  if (!train.steps.defined() || train.steps.dim() != 3 || !val.steps.defined() ||
      val.steps.dim() != 3 || val.steps.size(2) != train.steps.size(2) ||
      val.steps.size(0) != train.steps.size(0) || !train.vit.defined() || !val.vit.defined() ||
      train.vit.size(1) != val.vit.size(1))
    throw std::invalid_argument(
        "evaluate_backbone: expected [K, N, D] glimpse states and [N, D] ViT-mode features of "
        "equal K and D in both splits");
  BackboneEvaluation e;
  if (vit_from != nullptr) {
    e.vit = vit_from->vit;
    e.vit_head = vit_from->vit_head;
  } else {
    e.vit = evaluate_view(train.vit, train.labels, val.vit, val.labels, classes, o, &e.vit_head);
  }
  e.task_head = fit_linear_probe(train.steps, train.labels, classes, o.linear);
  for (int64_t k = 0; k < train.steps.size(0); ++k) {
    ModeScores s;
    s.knn = knn_accuracy(train.steps[k], train.labels, val.steps[k], val.labels, classes, o.knn);
    s.linear = linear_accuracy(val.steps[k], val.labels, e.task_head.weight, e.task_head.bias);
    e.steps.push_back(s);
  }
  return e;
}

}  // namespace saccade::probe
