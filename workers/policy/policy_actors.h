// The policy stage as actors of the distributed runtime (`saccade run` of a
// job with stage policy): the policy learner (learner 0's slot) trains the
// gaze policy with GRPO, and rollout actors run its rollouts against the
// frozen backbone and task head, both sent by the coordinator (the probe
// stage's head, or policy.input_dir's probe_head.safetensors, and the
// pretraining checkpoint it names). The learner spreads each rollout batch
// over the rollout actors (assignment().peers), keeps the rollouts it trained
// on in job.work_dir/rollouts.db, checkpoints through the coordinator, and
// writes policy.safetensors and policy.json like `saccade policy`.
#pragma once

#include <memory>

#include "model/options.h"
#include "workers/policy/rollout_client.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::policy {

// Exit codes besides 0 (done or drained): 1 on any error, logged.
std::unique_ptr<runtime::ActorBody> make_policy_learner();
std::unique_ptr<runtime::ActorBody> make_rollout_actor();
// The client of a learner slot (the policy learner, the eval leader) to the
// actors of its assignment's peers, for a backbone of `backbone`'s state; its
// stopping() is ctx's.
RolloutClientOptions rollout_client_options(runtime::ActorContext& ctx,
                                            const model::BackboneOptions& backbone);
// The eval stage's eval actor: a rollout actor of the validation split, which
// runs the glimpse traces the eval leader (workers/eval/eval_actor.h) sends it.
std::unique_ptr<runtime::ActorBody> make_eval_actor();

}  // namespace saccade::policy
