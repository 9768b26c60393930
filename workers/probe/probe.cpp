#include "workers/probe/probe.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "kernels/parallel.h"
#include "model/backbone.h"
#include "workers/pretrain/view_tensors.h"

namespace saccade::workers {
namespace {

// Seed of image i's gazes: a SplitMix64 step, so that neighbouring images differ.
uint64_t image_seed(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

ProbeFeatures extract_probe_features(model::FovealBackboneImpl& backbone,
                                     const data::Dataset& dataset, const data::ViewOptions& views,
                                     const FeatureOptions& o) {
  if (o.glimpses < 1 || o.batch_size < 1 || o.max_images < 0)
    throw std::invalid_argument("extract_probe_features: glimpses and batch_size must be >= 1");
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
    const ViewTensors vit_views = to_tensors(batch.vit, device);
    const torch::Tensor vit =
        backbone.step(vit_views.patches, vit_views.positions).state.select(1, 0);
    f.vit.narrow(0, first, b).copy_(vit.to(torch::kCPU, torch::kFloat32));
    const ViewTensors seq = to_tensors(batch.seq, device);
    torch::Tensor state;
    for (int k = 0; k < o.glimpses; ++k) {  // step-major: glimpse k of the batch is one slice
      const ViewTensors glimpse = seq.rows(k * b, b);
      state = backbone.step(glimpse.patches, glimpse.positions, state).state;
      f.steps[k].narrow(0, first, b).copy_(state.select(1, 0).to(torch::kCPU, torch::kFloat32));
    }
    f.labels.narrow(0, first, b).copy_(torch::from_blob(batch.labels.data(), {b}, torch::kInt64));
  }
  backbone.train(was_training);
  f.skipped_corrupt = dataset.stats().skipped_corrupt() - skipped_before;
  return f;
}

double probe_accuracy(const at::Tensor& features, const at::Tensor& labels,
                      const at::Tensor& weight, const at::Tensor& bias) {
  torch::NoGradGuard no_grad;
  const torch::Tensor predicted = torch::addmm(bias, features, weight.t()).argmax(1);
  return predicted.eq(labels).to(torch::kFloat64).mean().item<double>();
}

ProbeResult train_linear_probe(const ProbeFeatures& train, const ProbeFeatures& val,
                               int64_t classes, const LinearProbeOptions& o) {
  if (!train.steps.defined() || train.steps.dim() != 3 || train.steps.size(1) < 1 ||
      !val.steps.defined() || val.steps.dim() != 3 || val.steps.size(2) != train.steps.size(2))
    throw std::invalid_argument("train_linear_probe: expected [K, N, D] features of equal D");
  if (classes < 2) throw std::invalid_argument("train_linear_probe: needs >= 2 classes");
  if (o.lrs.empty() || o.epochs < 1 || o.batch_size < 1)
    throw std::invalid_argument("train_linear_probe: needs lrs, epochs >= 1 and batch_size >= 1");
  if (train.labels.min().item<int64_t>() < 0 || train.labels.max().item<int64_t>() >= classes)
    throw std::invalid_argument(
        fmt::format("train_linear_probe: labels must be in [0, {})", classes));
  const int64_t K = train.steps.size(0), N = train.steps.size(1), D = train.steps.size(2);
  const torch::Tensor x = train.steps.reshape({K * N, D});
  const torch::Tensor y = train.labels.repeat({K});
  const int64_t examples = K * N;
  const int64_t steps_per_epoch = (examples + o.batch_size - 1) / o.batch_size;
  const int64_t total = o.epochs * steps_per_epoch;
  const int64_t last = val.steps.size(0) - 1;

  ProbeResult best;
  best.sweep.reserve(o.lrs.size());
  double best_accuracy = -1;
  for (double lr : o.lrs) {
    torch::manual_seed(o.seed);
    torch::Tensor weight = (torch::randn({classes, D}) * 0.01).requires_grad_();  // DINO's init
    torch::Tensor bias = torch::zeros({classes}).requires_grad_();
    torch::optim::SGD sgd(
        {weight, bias},
        torch::optim::SGDOptions(lr).momentum(o.momentum).weight_decay(o.weight_decay));
    std::mt19937_64 rng(o.seed);
    std::vector<int64_t> order(static_cast<size_t>(examples));
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const torch::Tensor perm = torch::from_blob(order.data(), {examples}, torch::kInt64);
      for (int64_t start = 0; start < examples; start += o.batch_size, ++step) {
        const torch::Tensor idx = perm.narrow(0, start, std::min(o.batch_size, examples - start));
        const double rate = 0.5 * lr * (1 + std::cos(M_PI * static_cast<double>(step) / total));
        for (auto& group : sgd.param_groups())
          static_cast<torch::optim::SGDOptions&>(group.options()).lr(rate);
        sgd.zero_grad();
        const torch::Tensor logits = torch::addmm(bias, x.index_select(0, idx), weight.t());
        torch::nn::functional::cross_entropy(logits, y.index_select(0, idx)).backward();
        sgd.step();
      }
    }
    const double accuracy = probe_accuracy(val.steps[last], val.labels, weight, bias);
    best.sweep.emplace_back(lr, accuracy);
    if (accuracy > best_accuracy) {
      best_accuracy = accuracy;
      best.lr = lr;
      best.weight = weight.detach();
      best.bias = bias.detach();
    }
  }
  best.vit_accuracy = probe_accuracy(val.vit, val.labels, best.weight, best.bias);
  for (int64_t k = 0; k <= last; ++k)
    best.step_accuracy.push_back(probe_accuracy(val.steps[k], val.labels, best.weight, best.bias));
  return best;
}

}  // namespace saccade::workers
