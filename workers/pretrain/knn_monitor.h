// Learning visible while it happens: DINO's k-NN top-1 of the teacher's
// first state token in ViT mode and after each of a few random glimpses,
// measured during pretraining on images held apart from the probe's reported
// split (the last images of the training split are the bank, the last of the
// validation split the queries). The views are cut once, unaugmented, at fixed
// gazes. Torch-free header; the job config's mapping is
// workers/job_options/pretrain_options.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/dataset_factory.h"
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

struct KnnMonitorOptions {
  int64_t every_steps = 0;       // measure every this many optimiser steps; 0: no check
  data::DatasetSpec train, val;  // the bank's split and the queries' (open() reads them)
  int64_t bank_images = 0;       // the last images of `train` (all when fewer)
  int64_t query_images = 0;      // the last images of `val` (all when fewer)
  data::ViewOptions views;       // cut unaugmented whatever views.augment says
  int64_t glimpses = 0;          // random glimpses measured after ViT mode
  int64_t k = 20;                // DINO's k-NN (probe::KnnOptions)
  double temperature = 0.07;     // and its similarity temperature
  uint64_t seed = 0;             // gazes of image i: (seed, i); the queries' differ
};

class KnnMonitor {
 public:
  // nullptr when options.every_steps is 0, the training split has no labels or
  // the validation split cannot be read (both logged: the check is optional).
  // Throws std::runtime_error when the training split cannot be read.
  static std::unique_ptr<KnnMonitor> open(const KnnMonitorOptions& options);
  // The check on `train`'s bank and `val`'s queries (options.train and .val
  // unread). Throws std::invalid_argument when every_steps < 1 or `train` has
  // fewer than 2 classes.
  KnnMonitor(const data::Dataset& train, const data::Dataset& val,
             const KnnMonitorOptions& options);

  // Whether `step` (optimiser steps done) is one to measure at.
  bool due(int64_t step) const { return step > 0 && step % every_ == 0; }
  // k-NN top-1 of the trainer's current teacher.
  KnnCheck measure(const SslTrainer& trainer) const;

  int64_t bank_images() const { return bank_labels_.size(); }
  int64_t query_images() const { return query_labels_.size(); }

 private:
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
