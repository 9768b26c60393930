// The probe (paper, "Linear Probing (Task Head)"): a linear head on the first
// state token of the FROZEN backbone, trained on the states that random
// glimpses produce, then measured in ViT mode and after every glimpse.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/views.h"

namespace saccade::model {
class FovealBackboneImpl;
}

namespace saccade::workers {

// What the frozen backbone says about each image, fp32 on the CPU.
struct ProbeFeatures {
  at::Tensor vit;               // [N, D]: first state token after one ViT-mode step
  at::Tensor steps;             // [K, N, D]: first state token after glimpse k of a random sequence
  at::Tensor labels;            // [N] int64
  int64_t skipped_corrupt = 0;  // images skipped (their next good neighbour stands in)
};

struct FeatureOptions {
  int glimpses = 8;          // K
  int64_t max_images = 0;    // the first max_images of the dataset; 0 = all
  int64_t batch_size = 256;  // images per forward pass
  int threads = 1;           // view-cutting threads
  uint64_t seed = 0;         // gazes of image i come from (seed, i) only
};

// Runs the backbone (eval mode, no gradient) over the dataset's images in
// order. The backbone stays where it is; features come back on the CPU.
ProbeFeatures extract_probe_features(model::FovealBackboneImpl& backbone,
                                     const data::Dataset& dataset, const data::ViewOptions& views,
                                     const FeatureOptions& options);

struct LinearProbeOptions {
  int64_t epochs = 100;
  int64_t batch_size = 256;
  std::vector<double> lrs = {1e-4, 1e-3, 1e-2, 1e-1};  // one head per rate, the best is kept
  double momentum = 0.9;
  double weight_decay = 0.0;
  uint64_t seed = 0;  // initialisation and shuffling
};

struct ProbeResult {
  double lr = 0;                                 // the rate kept: best on validation
  std::vector<std::pair<double, double>> sweep;  // (lr, validation accuracy after glimpse K)
  double vit_accuracy = 0;                       // validation top-1, ViT mode
  std::vector<double> step_accuracy;             // validation top-1 after glimpse k
  at::Tensor weight;                             // [classes, D] of the kept head
  at::Tensor bias;                               // [classes]
};

// Trains one linear head per rate with SGD (momentum, weight decay, cosine
// decay to 0) on every glimpse state of `train` (K x N examples), keeps the
// one best on `val` after its last glimpse. Throws std::invalid_argument on
// empty or mismatched features.
ProbeResult train_linear_probe(const ProbeFeatures& train, const ProbeFeatures& val,
                               int64_t classes, const LinearProbeOptions& options);

// Top-1 accuracy of argmax(features W^T + b) against labels.
double probe_accuracy(const at::Tensor& features, const at::Tensor& labels,
                      const at::Tensor& weight, const at::Tensor& bias);

}  // namespace saccade::workers
