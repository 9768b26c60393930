// The two classifiers of the standard frozen-feature protocol
// (docs/references.md, "The reference protocol"): DINO's weighted k-NN and a linear probe fitted
// properly (standardised features, multinomial logistic regression trained to convergence with
// L-BFGS, the L2 strength chosen on training images held apart from the reported split, then refit
// on all of them).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace saccade::probe {

// facebookresearch/dino eval_knn.py: L2-normalised features, cosine
// similarity, the k nearest training images vote with weight exp(sim / T).
struct KnnOptions {
  int64_t k = 20;
  double temperature = 0.07;
  int64_t chunk = 1024;  // queries per similarity matrix (bounds memory)
};

// Top-1 of each query row against the bank. bank [N, D], bank_labels [N]
// int64 in [0, classes), queries [M, D], query_labels [M]. Throws
// std::invalid_argument on empty or mismatched inputs.
double knn_accuracy(const at::Tensor& bank, const at::Tensor& bank_labels,
                    const at::Tensor& queries, const at::Tensor& query_labels, int64_t classes,
                    const KnnOptions& options = {});

struct LinearProbeOptions {
  // Inverse L2 strengths (scikit-learn's C: minimise C * sum CE + |W|^2 / 2).
  std::vector<double> cs = {0.01, 0.1, 1.0, 10.0};
  double holdout_fraction = 0.1;  // of the training images, to choose C on
  int64_t max_iterations = 1000;  // L-BFGS iterations per fit
  uint64_t seed = 0;              // which images are held apart
  // Each C (ascending) starts from the previous C's solution and the refit from the
  // kept C's: the same optima (strictly convex objectives) in fewer evaluations.
  bool warm_start = true;
  std::function<void()> on_progress;  // after each fit (may be empty): an actor's "alive"
};

// A linear head on RAW features: the standardisation is folded into it, so
// logits = features W^T + b whatever the head was fitted on.
struct LinearClassifier {
  at::Tensor weight;                             // [classes, D] fp32
  at::Tensor bias;                               // [classes] fp32
  double c = 0;                                  // the strength kept
  std::vector<std::pair<double, double>> sweep;  // (C, top-1 on the held-apart images), C ascending
  int64_t evaluations = 0;  // L-BFGS loss evaluations of the final fit (converged if < the cap)
  int64_t total_evaluations = 0;  // of every fit: the C sweep and the refit (the probe's cost)
};

// Fits on x [V, N, D]: V feature rows per image (1 for one view, K for the K
// glimpse states the task head reads), labels [N]. Images, not rows, are held
// apart, so no image is on both sides. Throws std::invalid_argument on empty
// or mismatched inputs, or labels outside [0, classes).
LinearClassifier fit_linear_probe(const at::Tensor& x, const at::Tensor& labels, int64_t classes,
                                  const LinearProbeOptions& options = {});

// The training images held apart to choose a probe's hyperparameters on: a
// seeded shuffle of [0, n) whose first round(n * fraction) images (at least
// 1, at most n - 1) are `held`, the rest `fit` (int64 image indices).
struct HeldApartSplit {
  at::Tensor fit, held;
};
HeldApartSplit held_apart_split(int64_t n, double fraction, uint64_t seed);

// Top-1 accuracy of argmax(features W^T + b) against labels.
double linear_accuracy(const at::Tensor& features, const at::Tensor& labels,
                       const at::Tensor& weight, const at::Tensor& bias);

}  // namespace saccade::probe
