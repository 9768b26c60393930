// Learning visible while it happens: DINO's k-NN top-1 of the teacher's
// first state token in ViT mode and after each of probe.glimpses random
// glimpses, measured during pretraining on images held apart from the probe's
// reported split (the last ssl.knn_bank_images of the training split are the
// bank, the last ssl.knn_query_images of the validation split the queries).
// The views are cut once, unaugmented, at fixed gazes. Torch-free header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "dataloader/views.h"

namespace saccade::pretrain {

class SslTrainer;

// One check: top-1 in [0, 1].
struct KnnCheck {
  double vit = 0;                // ViT mode
  std::vector<double> glimpses;  // after glimpse 1, 2, ... (empty: probe.glimpses = 0)

  // ("knn", vit), ("knn_glimpse_1", ...), ...: the metrics.jsonl fields.
  std::vector<std::pair<std::string, double>> metrics() const;
  // "k-NN 71.2%, 4 glimpses 46.0%": the progress line's note.
  std::string summary() const;
};

class KnnMonitor {
 public:
  // nullptr when ssl.knn_every_steps is 0 or the data have no labels.
  // Throws std::runtime_error when a split cannot be read.
  static std::unique_ptr<KnnMonitor> from_config(const JobConfig& config);

  // Whether `step` (optimiser steps done) is one to measure at.
  bool due(int64_t step) const { return step > 0 && step % every_ == 0; }
  // k-NN top-1 of the trainer's current teacher.
  KnnCheck measure(const SslTrainer& trainer) const;

  int64_t bank_images() const { return bank_labels_.size(); }
  int64_t query_images() const { return query_labels_.size(); }

 private:
  KnnMonitor() = default;
  int64_t every_ = 0;
  int64_t classes_ = 0;
  int64_t k_ = 20;
  double temperature_ = 0.07;
  int64_t glimpses_ = 0;
  // Views in chunks of images: ViT mode, and the glimpse sequences (step-major).
  std::vector<data::PatchBatch> bank_, queries_, bank_seq_, query_seq_;
  std::vector<int64_t> bank_labels_, query_labels_;
};

}  // namespace saccade::pretrain
