// The job config -> the pretraining's k-NN check (torch-free; data_options.h
// describes the adapter layer). A header of its own: the probe, policy and eval
// stages, which include the others, know nothing of workers/pretrain/.
#pragma once

#include "common/config.h"
#include "workers/pretrain/knn_monitor.h"

namespace saccade::job_options {

// ssl.knn_* (its period, bank and query images) with [probe]'s k-NN and glimpses,
// on [data]'s splits cut as [views] says, gazes seeded by job.seed.
pretrain::KnnMonitorOptions knn_monitor_options(const JobConfig& config);

}  // namespace saccade::job_options
