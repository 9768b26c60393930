// The smallest views and backbone the workers' tests run the real code on
// (1 channel, P = 4, 6 tokens per glimpse, width 16, 2 state tokens).
#pragma once

#include <torch/torch.h>

#include "dataloader/views.h"
#include "model/backbone.h"

namespace saccade::testing {

inline data::ViewOptions small_views() {
  data::ViewOptions v;
  v.patch_size = 4;
  v.channels = 1;
  v.multizoom = 2;
  v.zoom_max = 2.0f;
  v.fovea_grid = 2;
  v.fovea_zoom_min = 1.5f;
  v.fovea_zoom_max = 2.5f;
  v.glimpses = 3;
  v.vit_grid = 3;
  v.pixel_mean = {0.5f};
  v.pixel_std = {0.25f};
  return v;
}

// Seeded: every call builds the same weights.
inline model::FovealBackbone small_backbone() {
  model::BackboneOptions o;
  o.patch_size = 4;
  o.channels = 1;
  o.depth = 1;
  o.width = 16;
  o.heads = 2;
  o.n_state = 2;
  o.pos_mlp_hidden = 8;
  o.layerscale_init = 1.0;
  torch::manual_seed(0);
  return model::FovealBackbone(o);
}

}  // namespace saccade::testing
