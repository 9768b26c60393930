// Where GRPO's rollouts run: in the trainer's process (LocalRollouts) or on
// rollout actors over ZeroMQ (RolloutClient, workers/policy/rollout_client.h).
// Both run the same traces for the same batch: every draw of a trace comes
// from its image's seed (TraceOptions::image_seeds).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "workers/policy/gaze_traces.h"

namespace saccade::storage {
class RolloutStore;
}

namespace saccade::policy {

// One rollout batch as the trainer (or the evaluation) asks for it.
struct RolloutBatch {
  uint64_t policy_version = 0;   // which weights draw the gazes (the trainer's update count)
  std::vector<int64_t> indices;  // dataset indices of the images
  TraceOptions trace;            // steps, group, source, std, threads; image_seeds per index
  // The images resized by `scale` (eval's resolution sweep; data::ResizedDataset),
  // upsampled bilinearly or by replicating pixels.
  double scale = 1;
  bool bilinear_upscale = false;
};

// The largest RolloutBatch::scale a source accepts (eval.scales' bound).
inline constexpr double kMaxRolloutScale = 64;

class RolloutSource {
 public:
  virtual ~RolloutSource() = default;
  // The traces of `batch`, image-major, drawn with `policy` as it is now (its
  // version is batch.policy_version; null unless needs_policy(batch.trace.source)).
  // Throws on failure (bad input, no rollout actor answering while stopping).
  virtual Traces run(model::GazePolicyImpl* policy, const RolloutBatch& batch) = 0;
};

// Rollouts in this process against the frozen backbone and head.
class LocalRollouts : public RolloutSource {
 public:
  // Borrows the backbone and the dataset (they must outlive this); copies the
  // head (shares its tensors) and the view options.
  LocalRollouts(model::FovealBackboneImpl& backbone, probe::TaskHead head,
                const data::Dataset& dataset, data::ViewOptions views);
  ~LocalRollouts() override;
  // Throws std::invalid_argument for an image outside the dataset or a scale
  // outside (0, kMaxRolloutScale].
  Traces run(model::GazePolicyImpl* policy, const RolloutBatch& batch) override;

 private:
  const data::Dataset& images_at(double scale, bool bilinear);  // the dataset, resized

  model::FovealBackboneImpl& backbone_;
  const probe::TaskHead head_;
  const data::Dataset& dataset_;
  const data::ViewOptions views_;
  // The resized views of dataset_ asked for so far, by (scale, bilinear): owned.
  std::map<std::pair<double, bool>, std::unique_ptr<data::Dataset>> resized_;
};

// Passes every batch through to `inner` and keeps its groups in `store`
// (one entry per image under (policy_version, dataset index)), so the
// rollouts a policy was trained on can be read back.
class RecordedRollouts : public RolloutSource {
 public:
  // Borrows both; they must outlive this.
  RecordedRollouts(RolloutSource& inner, storage::RolloutStore& store);
  Traces run(model::GazePolicyImpl* policy, const RolloutBatch& batch) override;

 private:
  RolloutSource& inner_;
  storage::RolloutStore& store_;
};

}  // namespace saccade::policy
