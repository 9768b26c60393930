// A dataset whose images are another dataset's, resized by a fixed factor: the
// evaluation's resolution sweep (the same content at x1, x2, x4, x8 pixels).
#pragma once

#include <memory>

#include "dataloader/dataset.h"

namespace saccade::data {

class ResizedDataset final : public Dataset {
 public:
  // Up-sampling by `scale` replicates pixels (`bilinear` false: every box of
  // the original covers the same values, so any view's content is the same
  // up to the rounding of cell borders) or interpolates bilinearly; down-
  // sampling averages areas. Throws std::invalid_argument for a null base or
  // scale <= 0.
  ResizedDataset(std::shared_ptr<const Dataset> base, double scale, bool bilinear = false);

  int64_t size() const override { return base_->size(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  int channels() const override { return base_->channels(); }
  std::optional<Sample> get(int64_t index) const override;  // nullopt when the base's is corrupt
  const DatasetStats& stats() const override { return base_->stats(); }

 private:
  std::shared_ptr<const Dataset> base_;  // shared: one base serves every scale
  double scale_;
  bool bilinear_;
};

}  // namespace saccade::data
