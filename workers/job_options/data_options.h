// The job config's adapter layer: the one translation from the job config
// (common/config.h) to the plain option structs of the components, which never
// read the config themselves. Actors and commands build their parts through
// these functions. One header and target per kind of consumer, so that each
// links no more than it needs:
//   data_options.h          saccade_data_options: datasets, views, seeds, the
//                           batch split, shards, the loader, threads (no torch,
//                           no sockets)
//   link_options.h          saccade_link_options: the ends of the links between
//                           actors: keys, senders, limits (sockets, no torch)
//   remote_batch_options.h  saccade_remote_batch_options: a learner's batches
//                           from data actors (the cluster's sockets, no torch)
//   pretrain_options.h      saccade_pretrain_options: the pretraining's k-NN
//                           check (no torch; only pretraining includes it)
//   model_options.h         saccade_model_options: the model, the SSL trainer
//                           and its schedules, the gaze policy, its GRPO and
//                           its evaluation
//   probe_options.h         saccade_probe_options: the probe's features (and
//                           the eval stage's ViT rows), k-NN, linear and
//                           transformer heads
#pragma once

#include <cstdint>

#include "common/config.h"
#include "dataloader/dataset_factory.h"
#include "dataloader/sharded_sampler.h"
#include "dataloader/ssl_loader.h"
#include "dataloader/views.h"

namespace saccade::job_options {

// The training (or validation) split of [data].
data::DatasetSpec dataset_spec(const JobConfig& config, bool validation);
data::ViewOptions view_options(const JobConfig& config);

// Root of the views' random draws (view_seed_at): the same for the
// single-process loader and remote batches, so both cut the same views.
uint64_t view_seed_root(const JobConfig& config);

// Rank `rank` of `world_size` learners' shard of every epoch of a dataset of
// `dataset_size` images: shuffled by job.seed, the last batch padded by wrapping.
data::ShardOptions shard_options(const JobConfig& config, int64_t dataset_size, int world_size,
                                 int rank);

// The single-process loader's batches of `batch` images: [data]'s threads and
// queue, the remote batches' view seed root.
data::LoaderOptions loader_options(const JobConfig& config, int64_t batch);

// Images per optimiser step on one of `world_size` learners; throws
// std::invalid_argument when ssl.batch_size does not split evenly.
int64_t per_rank_batch(const JobConfig& config, int world_size);

// Optimiser steps per epoch: ssl.steps_per_epoch, or dataset size / global batch.
int64_t steps_per_epoch(const JobConfig& config, int64_t dataset_size);

// Threads for torch and loaders: the configured count, or all cores when 0.
int resolve_threads(int64_t configured);

}  // namespace saccade::job_options
