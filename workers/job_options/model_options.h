// The job config -> the model's, the SSL trainer's and the gaze policy's
// options: the torch side of the adapter layer that data_options.h describes.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "model/options.h"
#include "workers/policy/policy_train_options.h"
#include "workers/ssl/schedules.h"
#include "workers/ssl/trainer_options.h"

namespace saccade::job_options {

model::BackboneOptions backbone_options(const JobConfig& config);
model::DinoHeadOptions dino_head_options(const JobConfig& config);

// From the config: schedule_epochs = config.schedule_epochs or, when 0,
// config.epochs. Throws std::invalid_argument when steps_per_epoch < 1.
ssl::ScheduleOptions schedule_options(const SslConfig& config, int64_t steps_per_epoch);

// The trainer of a job: [model], [ssl] and job.seed, with the schedules of
// `steps_per_epoch` optimiser steps per epoch, on `device`.
ssl::TrainerOptions trainer_options(const JobConfig& config, int64_t steps_per_epoch,
                                    const std::string& device = "cpu");

// Config [policy] on a backbone of `backbone` options (validated; throws
// std::invalid_argument naming the field).
model::PolicyOptions policy_options_for(const JobConfig& config,
                                        const model::BackboneOptions& backbone);
// GRPO's options: [policy] over the first `max_train_images` (0: all).
policy::PolicyTrainOptions policy_train_options(const JobConfig& config, int64_t max_train_images);

}  // namespace saccade::job_options
