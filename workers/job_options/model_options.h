// The job config -> the model's, the SSL trainer's and the gaze policy's
// options (its GRPO and its evaluation): the torch side of the adapter layer
// that data_options.h describes.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "model/options.h"
#include "workers/policy/gaze_eval_options.h"
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

// Whose measurement of gaze sources: the policy stage's on the validation split
// (its final evaluation and its training curve), or the eval stage's.
enum class GazeEvalFor { kPolicyStage, kEvalStage };

// The policy stage's: policy.steps glimpses of a policy that sees the state
// unless policy.sees_state = false, policy.val_images images. The eval stage's:
// eval.glimpses glimpses of the policy (version 1), eval.images images,
// eval.upscale. Both: eval.batch_size images per batch, data.loader_threads,
// gazes seeded by job.seed (each stage its own). on_progress is left empty.
policy::GazeEvalOptions gaze_eval_options(const JobConfig& config, GazeEvalFor which);

}  // namespace saccade::job_options
