// The small views (4x4 patches, 3 channels) the data loader and data plane tests cut.
#pragma once

#include "dataloader/views.h"

namespace saccade::data::testing {

inline ViewOptions small_views() {
  ViewOptions o;
  o.patch_size = 4;
  o.channels = 3;
  o.multizoom = 3;
  o.zoom_max = 3.0f;
  o.fovea_grid = 2;
  o.fovea_zoom_min = 2.0f;
  o.fovea_zoom_max = 3.0f;
  o.glimpses = 2;
  o.global_grid = 4;
  o.global_scale_min = 0.32f;
  o.global_scale_max = 1.0f;
  o.local_grid = 2;
  o.local_views = 2;
  o.local_scale_min = 0.05f;
  o.local_scale_max = 0.32f;
  o.pixel_mean = {0.5f};
  o.pixel_std = {0.25f};
  return o;
}

}  // namespace saccade::data::testing
