// Learning visible while it happens: DINO's k-NN top-1 of the teacher's
// ViT-mode first state token, measured during pretraining on images held
// apart from the probe's reported split (the last ssl.knn_bank_images of the
// training split are the bank, the last ssl.knn_query_images of the
// validation split the queries). The views are cut once, unaugmented.
// Torch-free header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "dataloader/views.h"

namespace saccade::workers {

class SslTrainer;

class KnnMonitor {
 public:
  // nullptr when ssl.knn_every_steps is 0 or the data have no labels.
  // Throws std::runtime_error when a split cannot be read.
  static std::unique_ptr<KnnMonitor> from_config(const JobConfig& config);

  // Whether `step` (optimiser steps done) is one to measure at.
  bool due(int64_t step) const { return step > 0 && step % every_ == 0; }
  // k-NN top-1 of the trainer's current teacher, in [0, 1].
  double measure(const SslTrainer& trainer) const;

  int64_t bank_images() const { return bank_labels_.size(); }
  int64_t query_images() const { return query_labels_.size(); }

 private:
  KnnMonitor() = default;
  int64_t every_ = 0;
  int64_t classes_ = 0;
  int64_t k_ = 20;
  double temperature_ = 0.07;
  std::vector<data::PatchBatch> bank_, queries_;  // ViT-mode views in chunks
  std::vector<int64_t> bank_labels_, query_labels_;
};

}  // namespace saccade::workers
