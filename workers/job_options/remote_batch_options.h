// The job config -> a learner's remote batch source (the data actors' side of
// the adapter layer that data_options.h describes).
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "control/placement.h"
#include "dataloader/sharded_sampler.h"
#include "workers/data_plane/remote_source_options.h"

namespace saccade::job_options {

// The options of learner `me` (rank, node, peers) of a job: batches of `batch`
// images of `shard`, with the single-process loader's view seed root.
data_plane::RemoteSourceOptions batch_source_options(const JobConfig& config,
                                                     const control::Assignment& me,
                                                     data::ShardOptions shard, int64_t batch);

// Why this job's learners could not receive their batches (ssl.batch_size split over the
// cluster's learners, in frames of at most cluster.max_message_bytes), naming the keys to
// change; "" when they can, or when no pretraining learner is fed by data actors. Checked before a
// job starts (saccade run, coordinator, config check), where the learner would fail at start.
std::string learner_frame_problem(const JobConfig& config);

}  // namespace saccade::job_options
