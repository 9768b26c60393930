#include "workers/pretrain/knn_monitor.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>

#include "dataloader/dataset_factory.h"
#include "workers/data/data_options.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/probe/classifiers.h"

namespace saccade::workers {
namespace {

constexpr int64_t kChunk = 256;  // views per teacher forward pass

// The ViT-mode views of the last `count` images of `dataset`, in chunks.
void cut_last(const data::Dataset& dataset, int64_t count, const data::ViewOptions& views,
              std::vector<data::PatchBatch>& chunks, std::vector<int64_t>& labels) {
  const int64_t n = std::min(count, dataset.size());
  const int64_t first = dataset.size() - n;
  data::EvalBatch batch;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t b = std::min(kChunk, n - start);
    batch.allocate(views, b, /*glimpses=*/1);
    for (int64_t slot = 0; slot < b; ++slot) {
      const data::Sample s = data::get_or_next_good(dataset, first + start + slot);
      data::make_eval_views(views, s.image, /*seed=*/0, slot, batch);
      labels.push_back(s.label);
    }
    chunks.push_back(batch.vit);
  }
}

torch::Tensor features_of(const SslTrainer& trainer, const std::vector<data::PatchBatch>& chunks) {
  std::vector<torch::Tensor> parts;
  for (const data::PatchBatch& chunk : chunks) {
    std::vector<float> f = trainer.teacher_features(chunk);
    parts.push_back(
        torch::from_blob(f.data(), {chunk.views, static_cast<int64_t>(f.size()) / chunk.views})
            .clone());
  }
  return torch::cat(parts);
}

}  // namespace

std::unique_ptr<KnnMonitor> KnnMonitor::from_config(const JobConfig& config) {
  if (config.ssl.knn_every_steps == 0) return nullptr;
  const auto train = data::make_dataset(dataset_spec(config, /*validation=*/false));
  if (train->num_classes() < 2) {
    spdlog::warn("k-NN check off: the training split has no labels");
    return nullptr;
  }
  std::shared_ptr<const data::Dataset> val;
  try {  // the check is optional: a job without a validation split trains without it
    val = data::make_dataset(dataset_spec(config, /*validation=*/true));
  } catch (const std::exception& e) {
    spdlog::warn("k-NN check off (ssl.knn_every_steps): no validation split: {}", e.what());
    return nullptr;
  }
  std::unique_ptr<KnnMonitor> m(new KnnMonitor);
  m->every_ = config.ssl.knn_every_steps;
  m->classes_ = train->num_classes();
  m->k_ = config.probe.knn_k;
  m->temperature_ = config.probe.knn_temperature;
  data::ViewOptions views = view_options(config);
  views.augment = false;
  cut_last(*train, config.ssl.knn_bank_images, views, m->bank_, m->bank_labels_);
  cut_last(*val, config.ssl.knn_query_images, views, m->queries_, m->query_labels_);
  return m;
}

double KnnMonitor::measure(const SslTrainer& trainer) const {
  KnnOptions o;
  o.k = k_;
  o.temperature = temperature_;
  auto labels = [](const std::vector<int64_t>& l) {
    return torch::from_blob(const_cast<int64_t*>(l.data()), {static_cast<int64_t>(l.size())},
                            torch::kInt64);
  };
  return knn_accuracy(features_of(trainer, bank_), labels(bank_labels_),
                      features_of(trainer, queries_), labels(query_labels_), classes_, o);
}

}  // namespace saccade::workers
