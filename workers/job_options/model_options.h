// The one translation from the job config (common/config.h) to the plain
// option structs of the components. Components never read the config; actors
// and commands build their parts through these functions. The torch-free part
// (data, views, batch split, threads) is workers/data/data_options.h.
#pragma once

#include "common/config.h"
#include "dataloader/ssl_loader.h"
#include "model/options.h"
#include "workers/data/data_options.h"

namespace saccade::workers {

model::BackboneOptions backbone_options(const JobConfig& config);
model::DinoHeadOptions dino_head_options(const JobConfig& config);

}  // namespace saccade::workers
