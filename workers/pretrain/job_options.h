// The one translation from the job config (common/config.h) to the plain
// option structs of the components. Components never read the config; actors
// and commands build their parts through these functions.
#pragma once

#include "common/config.h"
#include "dataloader/dataset_factory.h"
#include "dataloader/ssl_loader.h"
#include "dataloader/views.h"
#include "model/options.h"

namespace saccade::workers {

// The training (or validation) split of [data].
data::DatasetSpec dataset_spec(const JobConfig& config, bool validation);
data::ViewOptions view_options(const JobConfig& config);
model::BackboneOptions backbone_options(const JobConfig& config);
model::DinoHeadOptions dino_head_options(const JobConfig& config);

// Images per optimiser step on one of `world_size` learners; throws
// std::invalid_argument when ssl.batch_size does not split evenly.
int64_t per_rank_batch(const JobConfig& config, int world_size);

// Optimiser steps per epoch: ssl.steps_per_epoch, or dataset size / global batch.
int64_t steps_per_epoch(const JobConfig& config, int64_t dataset_size);

// Threads for torch and loaders: the configured count, or all cores when 0.
int resolve_threads(int64_t configured);

}  // namespace saccade::workers
