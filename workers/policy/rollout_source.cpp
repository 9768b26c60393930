#include "workers/policy/rollout_source.h"

#include <fmt/format.h>

#include <stdexcept>

#include "storage/rollout_store.h"
#include "workers/policy/rollout_codec.h"

namespace saccade::workers {

LocalRollouts::LocalRollouts(model::FovealBackboneImpl& backbone, TaskHead head,
                             const data::Dataset& dataset, data::ViewOptions views)
    : backbone_(backbone), head_(std::move(head)), dataset_(dataset), views_(std::move(views)) {}

Traces LocalRollouts::run(model::GazePolicyImpl& policy, const RolloutBatch& batch) {
  for (int64_t index : batch.indices) {
    if (index < 0 || index >= dataset_.size())
      throw std::invalid_argument(
          fmt::format("rollouts: image {} outside the dataset's [0, {})", index, dataset_.size()));
  }
  std::vector<int64_t> labels;
  const std::vector<data::GlimpseCutter> images =
      load_glimpse_cutters(dataset_, views_, batch.indices, batch.trace.threads, &labels);
  model::GazePolicyImpl* drawing = needs_policy(batch.trace.source) ? &policy : nullptr;
  return run_traces(backbone_, head_, drawing, images, labels, batch.trace);
}

RecordedRollouts::RecordedRollouts(RolloutSource& inner, storage::RolloutStore& store)
    : inner_(inner), store_(store) {}

Traces RecordedRollouts::run(model::GazePolicyImpl& policy, const RolloutBatch& batch) {
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

}  // namespace saccade::workers
