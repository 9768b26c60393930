// The smallest sequential-to-global setting the pretraining tests train for real: views of
// 1 channel, P = 4, 3 glimpses, 2 local views; a 2-block width-32 backbone and a 64-prototype
// head on the CPU.
#pragma once

#include <cstdint>

#include "dataloader/views.h"
#include "tests/dataloader/small_views.h"
#include "workers/ssl/trainer_options.h"

namespace saccade::testing {

// The data loader's small views (tests/dataloader/small_views.h) in grey, with 3 glimpses.
inline data::ViewOptions small_ssl_views() {
  data::ViewOptions o = data::testing::small_views();
  o.channels = 1;
  o.zoom_max = 2.0f;
  o.fovea_zoom_min = 1.5f;
  o.fovea_zoom_max = 2.5f;
  o.glimpses = 3;
  o.pixel_mean = {0.2f};
  o.pixel_std = {0.3f};
  return o;
}

inline ssl::TrainerOptions small_ssl_trainer(int64_t steps_per_epoch) {
  ssl::TrainerOptions o;
  o.backbone.patch_size = 4;
  o.backbone.channels = 1;
  o.backbone.depth = 2;
  o.backbone.width = 32;
  o.backbone.heads = 2;
  o.backbone.n_state = 2;
  o.backbone.pos_mlp_hidden = 16;
  o.head.in_dim = 32;
  o.head.hidden_dim = 64;
  o.head.bottleneck_dim = 16;
  o.head.n_prototypes = 64;
  o.schedule.steps_per_epoch = steps_per_epoch;
  o.schedule.schedule_epochs = 10;
  o.schedule.lr = 2e-3;
  o.schedule.min_lr = 1e-5;
  o.schedule.warmup_epochs = 1;
  o.schedule.teacher_temp_warmup_epochs = 2;
  o.schedule.freeze_last_layer_epochs = 1;
  o.student_temp = 0.1;
  o.koleo_weight = 0.1;
  o.sinkhorn_iterations = 3;
  o.clip_grad = 3.0;
  o.device = "cpu";
  o.seed = 3;
  o.pixel_mean = {0.2f};  // as small_ssl_views() normalises them
  o.pixel_std = {0.3f};
  return o;
}

}  // namespace saccade::testing
