// The pieces of the policy stage that `saccade policy` (one process), the
// policy learner and the rollout actors share: the frozen backbone and task
// head, the initial policy, the training options from the config, and the
// train-evaluate-write sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/config.h"
#include "model/backbone.h"
#include "model/options.h"
#include "model/policy.h"
#include "workers/policy/gaze_traces.h"
#include "workers/policy/policy_job.h"
#include "workers/policy/policy_trainer.h"
#include "workers/probe/probe_job.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::policy {

class RolloutSource;

// The one-process commands': from policy.input_dir (job.work_dir when empty).
// Throws std::runtime_error when the head or its checkpoint is missing.
ProbeHeadInputs read_probe_head_inputs(const JobConfig& config);
// An actor's: from the coordinator, never from its node's files (the
// probe stage's head, or policy.input_dir's file). Throws std::runtime_error
// naming what did not arrive.
ProbeHeadInputs fetch_probe_head_inputs(runtime::ActorContext& ctx);
// Blob `blob` of what `query` asks the coordinator for (within
// cluster.checkpoint_timeout_s). Throws std::runtime_error naming the query
// when it does not arrive.
std::string fetch_input_blob(runtime::ActorContext& ctx, const control::CheckpointQuery& query,
                             const std::string& blob);

// The probe's heads (job.work_dir/probe_head.safetensors) and the teacher
// backbone of the checkpoint they name, frozen, on the CPU.
struct PolicyStage {
  probe::TaskHead head;      // after glimpses: the policy's reward
  probe::TaskHead vit_head;  // ViT mode's (undefined in files written before the probe kept one)
  int64_t checkpoint_step = -1;
  model::FovealBackbone backbone{nullptr};
  model::PolicyOptions policy_options;  // config [policy] on the backbone's state
  std::string backbone_file;  // the probe read this backbone file, not a checkpoint ("" if not)
};

// `saccade policy` (one process): the head and checkpoint read from
// policy.input_dir (job.work_dir when empty). Throws std::runtime_error when
// the head or its checkpoint is missing. Actors get the same bytes from the
// coordinator instead (workers/policy/policy_actors.cpp).
PolicyStage load_policy_stage(const JobConfig& config);
// The stage from the head's bytes (`head_origin` names them in errors) and the
// backbone (model::export_backbone's safetensors) of the checkpoint it names.
PolicyStage policy_stage_from(const JobConfig& config, const std::string& head_bytes,
                              const std::string& head_origin,
                              const std::string& backbone_safetensors);
// The policy GRPO starts from (seeded by job.seed: every process builds the same).
model::GazePolicy initial_policy(const JobConfig& config, const PolicyStage& stage);

// Trains `policy` with `rollouts` on the training split (resumed and
// checkpointed as `progress` says), evaluates it against random gazes and the
// scan path on the validation split, trains and evaluates the learned fixed path
// after it (policy.fixed_path_baseline; same rollouts; run.fixed_path_weights, a
// checkpoint's, skip its training; run.on_fixed_path gets its weights), writes
// work_dir/policy.safetensors, policy_fixed_path.safetensors and policy.json, and
// returns what it measured. When progress.stopping() ended the training it
// returns at once, evaluating and writing nothing (`stopped` set).
PolicyReport train_and_evaluate_policy(const JobConfig& config, PolicyStage& stage,
                                       model::GazePolicyImpl& policy, RolloutSource& rollouts,
                                       const PolicyRunOptions& run,
                                       const std::function<void(const PolicyEpoch&)>& on_epoch = {},
                                       const PolicyProgress& progress = {});

}  // namespace saccade::policy
