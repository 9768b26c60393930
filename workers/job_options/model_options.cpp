#include "workers/pretrain/job_options.h"

namespace saccade::workers {

model::BackboneOptions backbone_options(const JobConfig& config) {
  const ModelConfig& m = config.model;
  model::BackboneOptions o;
  o.patch_size = m.patch_size;
  o.channels = config.data.channels;
  o.depth = m.depth;
  o.width = m.width;
  o.heads = m.heads;
  o.mlp_ratio = m.mlp_ratio;
  o.n_state = m.n_state;
  o.pos_mlp_hidden = m.pos_mlp_hidden;
  o.layerscale_init = m.layerscale_init;
  o.state_input = model::parse_state_input(m.state_input);
  return o;
}

model::DinoHeadOptions dino_head_options(const JobConfig& config) {
  model::DinoHeadOptions o;
  o.in_dim = config.model.width;
  o.hidden_dim = config.ssl.head_hidden;
  o.bottleneck_dim = config.ssl.head_bottleneck;
  o.n_prototypes = config.ssl.head_prototypes;
  return o;
}

}  // namespace saccade::workers
