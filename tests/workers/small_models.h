// The smallest views and backbone the workers' tests run the real code on
// (1 channel, P = 4, 6 tokens per glimpse, width 16, 2 state tokens).
#pragma once

#include <torch/torch.h>

#include <opencv2/core.hpp>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "model/backbone.h"
#include "model/heads.h"
#include "model/policy.h"

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

// Images of one class: flat grey (the backbone then sees only where it looks) or
// noise, 40 x 32 (non-square: extent (1, 1.25)).
class OneClassDataset : public data::Dataset {
 public:
  OneClassDataset(int64_t n, bool noise) : n_(n), noise_(noise) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 2; }
  int channels() const override { return 1; }
  std::optional<data::Sample> get(int64_t i) const override {
    cv::Mat m(40, 32, CV_8UC1, cv::Scalar(128));
    if (noise_) cv::RNG(static_cast<uint64_t>(i) + 1).fill(m, cv::RNG::UNIFORM, 0, 256);
    return data::Sample{m, 0, "generated"};
  }
  const data::DatasetStats& stats() const override { return stats_; }

 private:
  int64_t n_;
  bool noise_;
  data::DatasetStats stats_;
};

// Seeded: every call builds the same weights.
inline model::GazePolicy small_policy() {
  model::PolicyOptions o;
  o.in_dim = 16;
  o.n_state = 2;
  o.width = 16;
  o.depth = 1;
  o.heads = 2;
  o.n_mix = 2;
  torch::manual_seed(1);
  return model::GazePolicy(o);
}

// A transformer task head (heads.h) on `n_state` state tokens of width `in_dim`.
inline std::shared_ptr<model::TaskHeadImpl> small_transformer_head(int64_t in_dim, int64_t n_state,
                                                                   int64_t classes) {
  model::TaskHeadOptions o;
  o.kind = model::TaskHeadOptions::Kind::kTransformer;
  o.in_dim = in_dim;
  o.n_state = n_state;
  o.n_classes = classes;
  o.heads = 2;
  auto head = std::make_shared<model::TaskHeadImpl>(o);
  head->eval();
  return head;
}

}  // namespace saccade::testing
