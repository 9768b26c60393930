#include "workers/probe/classifiers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <stdexcept>

namespace saccade::probe {
namespace {

void check_labels(const torch::Tensor& labels, int64_t n, int64_t classes, const char* what) {
  if (!labels.defined() || labels.dim() != 1 || labels.size(0) != n)
    throw std::invalid_argument(fmt::format("{}: expected {} labels", what, n));
  if (classes < 2) throw std::invalid_argument(fmt::format("{}: needs >= 2 classes", what));
  if (labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= classes)
    throw std::invalid_argument(fmt::format("{}: labels must be in [0, {})", what, classes));
}

// Standardised rows -> (W, b) minimising mean CE + |W|^2 / (2 C n), in fp64.
struct Fit {
  torch::Tensor weight, bias;
  int64_t evaluations = 0;
};

// Starts from `initial` when it holds a fit (a warm start), else from zeros.
Fit fit_logistic(const torch::Tensor& x, const torch::Tensor& y, int64_t classes, double c,
                 int64_t max_iterations, const Fit& initial) {
  const int64_t n = x.size(0), d = x.size(1);
  const bool warm = initial.weight.defined();
  torch::Tensor weight =
      (warm ? initial.weight.clone() : torch::zeros({classes, d}, torch::kFloat64))
          .requires_grad_();
  torch::Tensor bias =
      (warm ? initial.bias.clone() : torch::zeros({classes}, torch::kFloat64)).requires_grad_();
  const double l2 = 1.0 / (2.0 * c * static_cast<double>(n));
  torch::optim::LBFGS lbfgs({weight, bias}, torch::optim::LBFGSOptions(1.0)
                                                .max_iter(max_iterations)
                                                .max_eval(max_iterations * 5 / 4)
                                                .tolerance_grad(1e-5)
                                                .tolerance_change(1e-9)
                                                .history_size(20)
                                                .line_search_fn("strong_wolfe"));
  int64_t evaluations = 0;
  const auto start = std::chrono::steady_clock::now();
  lbfgs.step([&] {
    lbfgs.zero_grad();
    ++evaluations;
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(torch::addmm(bias, x, weight.t()), y) +
        l2 * weight.pow(2).sum();
    loss.backward();
    return loss;
  });
  spdlog::debug("linear probe: C {} on {} x {} in {} evaluations ({} start), {:.1f} s", c, n, d,
                evaluations, warm ? "warm" : "cold",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return {weight.detach(), bias.detach(), evaluations};
}

struct Standardiser {
  torch::Tensor mean, scale;  // of the fitted rows; constant columns get scale 1
  explicit Standardiser(const torch::Tensor& rows) {
    mean = rows.mean(0);
    scale = rows.std(0, /*unbiased=*/false);
    scale = torch::where(scale > 1e-12, scale, torch::ones_like(scale));
  }
  torch::Tensor operator()(const torch::Tensor& rows) const { return (rows - mean) / scale; }
};

}  // namespace

double knn_accuracy(const at::Tensor& bank, const at::Tensor& bank_labels,
                    const at::Tensor& queries, const at::Tensor& query_labels, int64_t classes,
                    const KnnOptions& o) {
  if (!bank.defined() || bank.dim() != 2 || bank.size(0) < 1 || !queries.defined() ||
      queries.dim() != 2 || queries.size(0) < 1 || queries.size(1) != bank.size(1))
    throw std::invalid_argument("knn_accuracy: expected [N, D] bank and [M, D] queries");
  if (o.k < 1 || o.temperature <= 0 || o.chunk < 1)
    throw std::invalid_argument("knn_accuracy: needs k >= 1, temperature > 0, chunk >= 1");
  check_labels(bank_labels, bank.size(0), classes, "knn_accuracy (bank)");
  check_labels(query_labels, queries.size(0), classes, "knn_accuracy (queries)");
  torch::NoGradGuard no_grad;
  namespace F = torch::nn::functional;
  const auto unit = F::NormalizeFuncOptions().p(2).dim(1);
  const torch::Tensor b = F::normalize(bank.to(torch::kFloat32), unit);
  const torch::Tensor q_all = F::normalize(queries.to(torch::kFloat32), unit);
  const int64_t k = std::min(o.k, b.size(0));
  int64_t correct = 0;
  for (int64_t first = 0; first < q_all.size(0); first += o.chunk) {
    const int64_t m = std::min(o.chunk, q_all.size(0) - first);
    const torch::Tensor sim = q_all.narrow(0, first, m).matmul(b.t());
    auto [top_sim, top_idx] = sim.topk(k, 1);
    // exp((sim - row max) / T): the same factor for every class of a row, never overflowing.
    const torch::Tensor weights = ((top_sim - top_sim.narrow(1, 0, 1)) / o.temperature).exp();
    const torch::Tensor votes =
        torch::zeros({m, classes})
            .scatter_add_(1, bank_labels.index_select(0, top_idx.reshape(-1)).reshape({m, k}),
                          weights);
    correct += votes.argmax(1).eq(query_labels.narrow(0, first, m)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(q_all.size(0));
}

double linear_accuracy(const at::Tensor& features, const at::Tensor& labels,
                       const at::Tensor& weight, const at::Tensor& bias) {
  torch::NoGradGuard no_grad;
  const torch::Tensor predicted =
      torch::addmm(bias, features.to(weight.scalar_type()), weight.t()).argmax(1);
  return predicted.eq(labels).to(torch::kFloat64).mean().item<double>();
}

HeldApartSplit held_apart_split(int64_t n, double fraction, uint64_t seed) {
  if (n < 2 || !(fraction > 0 && fraction < 1))
    throw std::invalid_argument("held_apart_split: needs n >= 2 and 0 < fraction < 1");
  // A seeded shuffle, so an image's place in the dataset does not decide.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const int64_t held =
      std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(n) * fraction + 0.5), 1, n - 1);
  const torch::Tensor perm = torch::from_blob(order.data(), {n}, torch::kInt64).clone();
  return {perm.narrow(0, held, n - held), perm.narrow(0, 0, held)};
}

LinearClassifier fit_linear_probe(const at::Tensor& x, const at::Tensor& labels, int64_t classes,
                                  const LinearProbeOptions& o) {
  if (!x.defined() || x.dim() != 3 || x.size(0) < 1 || x.size(1) < 2 || x.size(2) < 1)
    throw std::invalid_argument(
        "fit_linear_probe: expected features [views, N >= 2, D] of at least 2 images");
  if (o.cs.empty() || o.max_iterations < 1 || !(o.holdout_fraction > 0 && o.holdout_fraction < 1))
    throw std::invalid_argument(
        "fit_linear_probe: needs Cs, max_iterations >= 1 and 0 < holdout_fraction < 1");
  for (double c : o.cs)
    if (!(c > 0)) throw std::invalid_argument(fmt::format("fit_linear_probe: C {} is not > 0", c));
  const int64_t views = x.size(0), n = x.size(1), d = x.size(2);
  check_labels(labels, n, classes, "fit_linear_probe");

  const HeldApartSplit split = held_apart_split(n, o.holdout_fraction, o.seed);
  const torch::Tensor& fit_images = split.fit;
  const torch::Tensor& held_images = split.held;

  torch::NoGradGuard outer_no_grad;  // gradients only inside fit_logistic
  const torch::Tensor all = x.to(torch::kFloat64);
  auto rows = [&](const torch::Tensor& images) {
    return all.index_select(1, images).reshape({-1, d});
  };
  auto row_labels = [&](const torch::Tensor& images) {
    return labels.index_select(0, images).repeat({views});
  };

  // Ascending C, so that a warm start follows the regularisation path from the most
  // regularised (quickest) fit; every objective is strictly convex, so a start changes
  // the evaluations, not the optimum.
  std::vector<double> cs = o.cs;
  std::sort(cs.begin(), cs.end());
  LinearClassifier out;
  double best = -1;
  Fit kept;  // the held-apart winner: the refit's warm start
  {
    const torch::Tensor fit_x = rows(fit_images), held_x = rows(held_images);
    const Standardiser standardise(fit_x);
    const torch::Tensor sx = standardise(fit_x), sh = standardise(held_x);
    const torch::Tensor fy = row_labels(fit_images), hy = row_labels(held_images);
    Fit previous;
    for (double c : cs) {
      torch::AutoGradMode grad(true);
      Fit f = fit_logistic(sx, fy, classes, c, o.max_iterations, o.warm_start ? previous : Fit{});
      if (o.on_progress) o.on_progress();
      out.total_evaluations += f.evaluations;
      const double accuracy = linear_accuracy(sh, hy, f.weight, f.bias);
      out.sweep.emplace_back(c, accuracy);
      if (accuracy > best) {
        best = accuracy;
        out.c = c;
        kept = f;
      }
      previous = std::move(f);
    }
  }
  // Refit on every training image with the C kept, then fold the standardisation in.
  const torch::Tensor every_x = all.reshape({-1, d});
  const Standardiser standardise(every_x);
  Fit f;
  {
    torch::AutoGradMode grad(true);
    f = fit_logistic(standardise(every_x), labels.repeat({views}), classes, out.c, o.max_iterations,
                     o.warm_start ? kept : Fit{});
  }
  if (o.on_progress) o.on_progress();
  out.total_evaluations += f.evaluations;
  const torch::Tensor w = f.weight / standardise.scale;
  out.weight = w.to(torch::kFloat32);
  out.bias = (f.bias - w.matmul(standardise.mean)).to(torch::kFloat32);
  out.evaluations = f.evaluations;
  return out;
}

}  // namespace saccade::probe
