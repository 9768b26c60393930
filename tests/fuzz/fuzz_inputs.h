// What the fuzz targets and their seed writer share: the job a frame must belong to and
// the views a batch must have been cut with (the data plane tests' small views).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dataloader/views.h"
#include "tests/dataloader/small_views.h"

namespace saccade::fuzz {

inline const std::string kJobId = "fuzz";
inline constexpr size_t kMaxFrameBytes = size_t{1} << 20;
inline constexpr int64_t kBatchImages = 2;
inline constexpr int kShipMaxSide = 48;

// The views of a batch frame; `learner_cuts`: the image and boxes travel (views.cut_on).
inline data::ViewOptions batch_views(bool learner_cuts) {
  data::ViewOptions views = data::testing::small_views();
  views.cut_on_learner = learner_cuts;
  views.ship_max_side = learner_cuts ? kShipMaxSide : 0;
  return views;
}

}  // namespace saccade::fuzz
