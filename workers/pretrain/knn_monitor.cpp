#include "workers/pretrain/knn_monitor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "dataloader/dataset_factory.h"
#include "dataloader/random.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/probe/classifiers.h"

namespace saccade::pretrain {
namespace {

constexpr int64_t kChunk = 256;  // images per teacher forward pass

// The evaluation views of the last `count` images of `dataset`, in chunks: the
// ViT-mode grid and `glimpses` glimpses at gazes seeded by the image's index.
struct Views {
  std::vector<data::PatchBatch> vit, seq;
  std::vector<int64_t> labels;
};

Views cut_last(const data::Dataset& dataset, int64_t count, const data::ViewOptions& views,
               int64_t glimpses, uint64_t seed) {
  Views out;
  const int64_t n = std::min(count, dataset.size());
  const int64_t first = dataset.size() - n;
  data::EvalBatch batch;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t b = std::min(kChunk, n - start);
    batch.allocate(views, b, glimpses);
    for (int64_t slot = 0; slot < b; ++slot) {
      const int64_t index = first + start + slot;
      const data::Sample s = data::get_or_next_good(dataset, index);
      data::make_eval_views(views, s.image, data::mix_seed(seed, static_cast<uint64_t>(index)),
                            slot, batch);
      out.labels.push_back(s.label);
    }
    out.vit.push_back(batch.vit);
    if (glimpses > 0) out.seq.push_back(batch.seq);
  }
  return out;
}

// Features [steps, images, width] of chunks of `steps`-step views.
torch::Tensor features_of(const SslTrainer& trainer, const std::vector<data::PatchBatch>& chunks,
                          int64_t steps) {
  std::vector<torch::Tensor> parts;
  for (const data::PatchBatch& chunk : chunks) {
    std::vector<float> f = trainer.teacher_features(chunk, steps);
    const int64_t images = chunk.views / steps;
    parts.push_back(
        torch::from_blob(f.data(), {steps, images, static_cast<int64_t>(f.size()) / chunk.views})
            .clone());
  }
  return torch::cat(parts, 1);
}

torch::Tensor as_tensor(const std::vector<int64_t>& labels) {
  return torch::from_blob(const_cast<int64_t*>(labels.data()),
                          {static_cast<int64_t>(labels.size())}, torch::kInt64);
}

}  // namespace

std::vector<std::pair<std::string, double>> KnnCheck::metrics() const {
  std::vector<std::pair<std::string, double>> out = {{"knn", vit}};
  for (size_t k = 0; k < glimpses.size(); ++k)
    out.emplace_back(fmt::format("knn_glimpse_{}", k + 1), glimpses[k]);
  return out;
}

std::string KnnCheck::summary() const {
  std::string s = fmt::format("k-NN {:.1f}%", 100 * vit);
  if (!glimpses.empty())
    s += fmt::format(", {} glimpses {:.1f}%", glimpses.size(), 100 * glimpses.back());
  return s;
}

std::unique_ptr<KnnMonitor> KnnMonitor::open(const KnnMonitorOptions& options) {
  if (options.every_steps == 0) return nullptr;
  const auto train = data::make_dataset(options.train);
  if (train->num_classes() < 2) {
    spdlog::warn("k-NN check off: the training split has no labels");
    return nullptr;
  }
  std::shared_ptr<const data::Dataset> val;
  try {  // the check is optional: a job without a validation split trains without it
    val = data::make_dataset(options.val);
  } catch (const std::exception& e) {
    spdlog::warn("k-NN check off (ssl.knn_every_steps): no validation split: {}", e.what());
    return nullptr;
  }
  return std::make_unique<KnnMonitor>(*train, *val, options);
}

KnnMonitor::KnnMonitor(const data::Dataset& train, const data::Dataset& val,
                       const KnnMonitorOptions& options)
    : every_(options.every_steps),
      classes_(train.num_classes()),
      k_(options.k),
      temperature_(options.temperature),
      glimpses_(options.glimpses) {
  if (every_ < 1)
    throw std::invalid_argument(
        fmt::format("k-NN check: every_steps must be >= 1, got {}", every_));
  if (classes_ < 2)
    throw std::invalid_argument(
        fmt::format("k-NN check: the bank needs labels of 2 or more classes, got {}", classes_));
  data::ViewOptions views = options.views;
  views.augment = false;
  Views bank = cut_last(train, options.bank_images, views, glimpses_, options.seed);
  Views queries = cut_last(val, options.query_images, views, glimpses_, options.seed ^ 0x7a1du);
  bank_ = std::move(bank.vit);
  bank_seq_ = std::move(bank.seq);
  bank_labels_ = std::move(bank.labels);
  queries_ = std::move(queries.vit);
  query_seq_ = std::move(queries.seq);
  query_labels_ = std::move(queries.labels);
}

KnnCheck KnnMonitor::measure(const SslTrainer& trainer) const {
  probe::KnnOptions o;
  o.k = k_;
  o.temperature = temperature_;
  const torch::Tensor bank_labels = as_tensor(bank_labels_);
  const torch::Tensor query_labels = as_tensor(query_labels_);
  KnnCheck check;
  check.vit = probe::knn_accuracy(features_of(trainer, bank_, 1)[0], bank_labels,
                                  features_of(trainer, queries_, 1)[0], query_labels, classes_, o);
  if (glimpses_ > 0) {
    const torch::Tensor bank = features_of(trainer, bank_seq_, glimpses_);
    const torch::Tensor queries = features_of(trainer, query_seq_, glimpses_);
    for (int64_t k = 0; k < glimpses_; ++k) {
      check.glimpses.push_back(
          probe::knn_accuracy(bank[k], bank_labels, queries[k], query_labels, classes_, o));
    }
  }
  return check;
}

}  // namespace saccade::pretrain
