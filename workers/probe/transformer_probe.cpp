#include "workers/probe/transformer_probe.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "model/heads.h"
#include "workers/probe/classifiers.h"

namespace saccade::probe {
namespace {

// Top-1 of `head` on rows [R, S, D], in chunks (no gradient, eval mode).
double accuracy_of(model::TaskHeadImpl& head, const torch::Tensor& rows,
                   const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  head.eval();
  int64_t correct = 0;
  for (int64_t first = 0; first < rows.size(0); first += 4096) {
    const int64_t m = std::min<int64_t>(4096, rows.size(0) - first);
    correct += head.forward(rows.narrow(0, first, m))
                   .argmax(1)
                   .eq(labels.narrow(0, first, m))
                   .sum()
                   .item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(rows.size(0));
}

std::vector<torch::Tensor> snapshot(model::TaskHeadImpl& head) {
  std::vector<torch::Tensor> out;
  for (const auto& p : head.parameters()) out.push_back(p.detach().clone());
  return out;
}

void restore(model::TaskHeadImpl& head, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  auto params = head.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
}

}  // namespace

TransformerClassifier fit_transformer_probe(const at::Tensor& x, const at::Tensor& labels,
                                            int64_t classes, const TransformerProbeOptions& o) {
  if (!x.defined() || x.dim() != 4 || x.size(0) < 1 || x.size(1) < 2)
    throw std::invalid_argument(
        "fit_transformer_probe: expected state tokens [views, N >= 2, S, D]");
  if (o.lrs.empty() || o.steps < 1 || o.checks < 1 || o.batch_size < 1)
    throw std::invalid_argument(
        "fit_transformer_probe: needs learning rates, steps >= 1, checks >= 1, batch_size >= 1");
  for (double lr : o.lrs)
    if (!(lr > 0))
      throw std::invalid_argument(fmt::format("fit_transformer_probe: lr {} is not > 0", lr));
  const int64_t views = x.size(0), n = x.size(1), s = x.size(2), d = x.size(3);
  if (!labels.defined() || labels.dim() != 1 || labels.size(0) != n || classes < 2 ||
      labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= classes)
    throw std::invalid_argument(fmt::format(
        "fit_transformer_probe: expected {} labels in [0, {}) with >= 2 classes", n, classes));

  model::TaskHeadOptions ho;
  ho.kind = model::TaskHeadOptions::Kind::kTransformer;
  ho.in_dim = d;
  ho.n_state = s;
  ho.n_classes = classes;
  ho.heads = o.heads;
  ho.mlp_ratio = o.mlp_ratio;
  ho.validate();

  const HeldApartSplit split = held_apart_split(n, o.holdout_fraction, o.seed);
  const torch::Tensor all = x.to(torch::kFloat32);
  auto rows = [&](const torch::Tensor& images) {
    return all.index_select(1, images).reshape({-1, s, d});
  };
  auto row_labels = [&](const torch::Tensor& images) {
    return labels.index_select(0, images).repeat({views});
  };
  const torch::Tensor fit_x = rows(split.fit), fit_y = row_labels(split.fit);
  const torch::Tensor held_x = rows(split.held), held_y = row_labels(split.held);
  const int64_t r = fit_x.size(0);
  // Per token and channel, over the fitted rows; constant channels get scale 1.
  const torch::Tensor mean = fit_x.mean(0);
  torch::Tensor scale = fit_x.std(0, /*unbiased=*/false);
  scale = torch::where(scale > 1e-12, scale, torch::ones_like(scale));
  const int64_t check_every = std::max<int64_t>(1, o.steps / o.checks);

  TransformerClassifier out;
  std::shared_ptr<model::TaskHeadImpl> best_head;
  double best = -1;
  for (double lr : o.lrs) {
    torch::manual_seed(o.seed);  // every trial starts from the same head
    auto head = std::make_shared<model::TaskHeadImpl>(ho);
    head->set_input_statistics(mean, scale);
    torch::optim::AdamW adamw(head->parameters(),
                              torch::optim::AdamWOptions(lr).weight_decay(o.weight_decay));
    TransformerClassifier::Trial trial{lr, {}};
    std::vector<torch::Tensor> kept;
    double trial_best = -1;
    int64_t trial_steps = 0;
    std::mt19937_64 rng(o.seed + 1);  // the same batches for every trial
    std::vector<int64_t> order(static_cast<size_t>(r));
    std::iota(order.begin(), order.end(), 0);
    torch::Tensor shuffled;
    int64_t next = r;  // the next row of the current pass
    head->train();
    for (int64_t step = 1; step <= o.steps; ++step) {
      if (next + o.batch_size > r) {  // a new pass over the rows, reshuffled
        std::shuffle(order.begin(), order.end(), rng);
        shuffled = torch::from_blob(order.data(), {r}, torch::kInt64).clone();
        next = 0;
      }
      const int64_t b = std::min(o.batch_size, r);
      const torch::Tensor idx = shuffled.narrow(0, next, b);
      next += b;
      // Cosine decay from lr to 0 over the trial.
      const double now =
          lr * 0.5 *
          (1 + std::cos(M_PI * static_cast<double>(step - 1) / static_cast<double>(o.steps)));
      for (auto& group : adamw.param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(now);
      adamw.zero_grad();
      torch::nn::functional::cross_entropy(head->forward(fit_x.index_select(0, idx)),
                                           fit_y.index_select(0, idx))
          .backward();
      adamw.step();
      if (step % check_every != 0 && step != o.steps) continue;
      const double accuracy = accuracy_of(*head, held_x, held_y);
      head->train();
      trial.held_accuracy.emplace_back(step, accuracy);
      if (accuracy > trial_best) {
        trial_best = accuracy;
        trial_steps = step;
        kept = snapshot(*head);
      }
      spdlog::debug("transformer probe: lr {} step {}: held-apart top-1 {:.4f}", lr, step,
                    accuracy);
      if (o.on_progress) o.on_progress();
    }
    out.sweep.push_back(trial);
    if (trial_best > best) {
      best = trial_best;
      restore(*head, kept);
      best_head = head;
      out.lr = lr;
      out.steps = trial_steps;
    }
  }
  best_head->eval();
  out.head = TaskHead(best_head);
  return out;
}

}  // namespace saccade::probe
