// The torch-free part of the translation from the job config (common/config.h)
// to the components' option structs: what data actors and learners both need.
// workers/pretrain/job_options.h adds the model's options on top.
#pragma once

#include <cstdint>

#include "common/config.h"
#include "dataloader/dataset_factory.h"
#include "dataloader/views.h"

namespace saccade::workers {

// The training (or validation) split of [data].
data::DatasetSpec dataset_spec(const JobConfig& config, bool validation);
data::ViewOptions view_options(const JobConfig& config);

// Root of the views' random draws (view_seed_at): the same for the
// single-process loader and remote batches, so both cut the same views.
uint64_t view_seed_root(const JobConfig& config);

// Images per optimiser step on one of `world_size` learners; throws
// std::invalid_argument when ssl.batch_size does not split evenly.
int64_t per_rank_batch(const JobConfig& config, int world_size);

// Optimiser steps per epoch: ssl.steps_per_epoch, or dataset size / global batch.
int64_t steps_per_epoch(const JobConfig& config, int64_t dataset_size);

// Threads for torch and loaders: the configured count, or all cores when 0.
int resolve_threads(int64_t configured);

}  // namespace saccade::workers
