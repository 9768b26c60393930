#include "workers/policy/rollout_source.h"

#include <fmt/format.h>

#include <stdexcept>

#include "dataloader/resized_dataset.h"
#include "storage/rollout_store.h"
#include "workers/policy/rollout_codec.h"

namespace saccade::policy {

LocalRollouts::LocalRollouts(model::FovealBackboneImpl& backbone, probe::TaskHead head,
                             const data::Dataset& dataset, data::ViewOptions views)
    : backbone_(backbone), head_(std::move(head)), dataset_(dataset), views_(std::move(views)) {}

LocalRollouts::~LocalRollouts() = default;

const data::Dataset& LocalRollouts::images_at(double scale, bool bilinear) {
  if (!(scale > 0 && scale <= kMaxRolloutScale))
    throw std::invalid_argument(
        fmt::format("rollouts: images resized by {} (expected (0, {}])", scale, kMaxRolloutScale));
  if (scale == 1) return dataset_;
  const std::pair<double, bool> key{scale, bilinear};
  auto found = resized_.find(key);
  if (found == resized_.end()) {
    // Scales come from requests: keep a few views (a sweep's), not one per request.
    if (resized_.size() >= 16) resized_.clear();
    // A resized view reads dataset_ through a pointer that owns nothing: dataset_ outlives this.
    const std::shared_ptr<const data::Dataset> base(std::shared_ptr<const data::Dataset>(),
                                                    &dataset_);
    found =
        resized_.emplace(key, std::make_unique<data::ResizedDataset>(base, scale, bilinear)).first;
  }
  return *found->second;
}

Traces LocalRollouts::run(model::GazePolicyImpl* policy, const RolloutBatch& batch) {
  for (int64_t index : batch.indices) {
    if (index < 0 || index >= dataset_.size())
      throw std::invalid_argument(
          fmt::format("rollouts: image {} outside the dataset's [0, {})", index, dataset_.size()));
  }
  const bool drawn = needs_policy(batch.trace.source);
  if (drawn && policy == nullptr)
    throw std::invalid_argument("rollouts: gazes drawn from a policy, but no policy was given");
  const data::Dataset& resized = images_at(batch.scale, batch.bilinear_upscale);
  std::vector<int64_t> labels;
  const std::vector<data::GlimpseCutter> images =
      load_glimpse_cutters(resized, views_, batch.indices, batch.trace.threads, &labels);
  return run_traces(backbone_, head_, drawn ? policy : nullptr, images, labels, batch.trace);
}

RecordedRollouts::RecordedRollouts(RolloutSource& inner, storage::RolloutStore& store)
    : inner_(inner), store_(store) {}

Traces RecordedRollouts::run(model::GazePolicyImpl* policy, const RolloutBatch& batch) {
  Traces traces = inner_.run(policy, batch);
  storage::RolloutStore::Groups groups;
  for (size_t b = 0; b < batch.indices.size(); ++b) {
    const auto image = static_cast<uint64_t>(batch.indices[b]);
    groups.emplace_back(image,
                        encode_rollout_group(traces, static_cast<int64_t>(b), batch.trace.group,
                                             batch.policy_version, image));
  }
  store_.put(batch.policy_version, groups);
  return traces;
}

}  // namespace saccade::policy
