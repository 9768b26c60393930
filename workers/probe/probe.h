// The probe (paper, "Linear Probing (Task Head)") under the standard protocol
// (docs/references.md, "The reference protocol"): the FROZEN backbone's first state token, in ViT
// mode and after every random glimpse, scored by k-NN and by a linear probe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "workers/probe/classifiers.h"

namespace saccade::model {
class FovealBackboneImpl;
}

namespace saccade::probe {

// What the frozen backbone says about each image, fp32 on the CPU.
struct ProbeFeatures {
  at::Tensor vit;     // [N, D]: first state token after one ViT-mode step
  at::Tensor steps;   // [K, N, D]: first state token after glimpse k of a random sequence
  at::Tensor pixels;  // [N, T*C*P*P]: the ViT-mode grid's pixels (FeatureOptions::pixels)
  // Every state token concatenated (FeatureOptions::all_states), the input the
  // paper's transformer head pools: [N, S*D] and [K, N, S*D].
  at::Tensor vit_all_states, steps_all_states;
  // The mean patch token (FeatureOptions::patch_mean; DINOv2's linear eval appends it to
  // the CLS token): ViT mode's grid [N, D], and after glimpse k the mean over every
  // patch of glimpses 1..k [K, N, D].
  at::Tensor vit_patch_mean, steps_patch_mean;
  at::Tensor labels;            // [N] int64
  int64_t skipped_corrupt = 0;  // images skipped (their next good neighbour stands in)
};

struct FeatureOptions {
  int glimpses = 8;          // K; 0: ViT mode only
  int64_t max_images = 0;    // the first max_images of the dataset; 0 = all
  int64_t batch_size = 256;  // images per forward pass
  int threads = 1;           // view-cutting threads
  uint64_t seed = 0;         // gazes of image i come from (seed, i) only
  bool pixels = false;       // also keep the ViT-mode grid's pixels (the raw-pixel baseline)
  bool all_states = false;   // also keep every state token (vit_all_states, steps_all_states)
  bool patch_mean = false;   // also keep the mean patch token (vit_patch_mean, steps_patch_mean)
  std::function<void()> on_progress;  // after each batch (may be empty)
};

// Runs the backbone (eval mode, no gradient) over the dataset's images in
// order. The backbone stays where it is; features come back on the CPU.
ProbeFeatures extract_probe_features(model::FovealBackboneImpl& backbone,
                                     const data::Dataset& dataset, const data::ViewOptions& views,
                                     const FeatureOptions& options);

// steps [K, N, D] -> [K, N, D] whose k-th entry is the mean of steps[0..k]: what
// the glimpses so far gave, each read on its own, with nothing carried between
// them (the glimpse_mean feature; it tells what the carried state lost).
// Throws std::invalid_argument on a tensor that is not 3-D.
at::Tensor mean_over_glimpses(const at::Tensor& steps);

// One way of reading the image, scored both ways on the validation split.
struct ModeScores {
  double knn = 0;     // DINO's weighted k-NN top-1, bank = the training split
  double linear = 0;  // linear-probe top-1
};

struct EvaluationOptions {
  KnnOptions knn;
  LinearProbeOptions linear;
};

// ViT mode gets its own head and k-NN bank. The glimpse states share one head
// fitted on all K of them (the paper's task head: used after every glimpse and
// as the policy's reward); glimpse k's k-NN bank is the training images'
// glimpse-k states.
struct BackboneEvaluation {
  ModeScores vit;
  std::vector<ModeScores> steps;  // after glimpse k
  LinearClassifier vit_head, task_head;
};

// Throws std::invalid_argument on mismatched features. `vit_from`, when given, is an
// evaluation of the same ViT-mode features (train.vit, val.vit): its ViT scores and head are
// copied instead of refitted (rows that differ only in their glimpse features).
BackboneEvaluation evaluate_backbone(const ProbeFeatures& train, const ProbeFeatures& val,
                                     int64_t classes, const EvaluationOptions& options,
                                     const BackboneEvaluation* vit_from = nullptr);

// One feature row per image ([N, D] each): a head and a k-NN bank of its own.
ModeScores evaluate_view(const at::Tensor& train, const at::Tensor& train_labels,
                         const at::Tensor& val, const at::Tensor& val_labels, int64_t classes,
                         const EvaluationOptions& options, LinearClassifier* head = nullptr);

}  // namespace saccade::probe
