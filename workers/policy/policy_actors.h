// The policy stage as actors of the distributed runtime (`saccade run` of a
// job whose first stage is policy): one policy learner that trains the gaze
// policy with GRPO, and rollout actors that run its rollouts against the
// frozen backbone and task head (job.work_dir/probe_head.safetensors and the
// checkpoint it names, read from the shared work_dir). The learner sends each
// rollout batch to every rollout actor (assignment().peers), keeps the
// rollouts it trained on in job.work_dir/rollouts.db, and writes
// policy.safetensors and policy.json like `saccade policy`.
#pragma once

#include <memory>

#include "workers/runtime/actor_runtime.h"

namespace saccade::workers {

// Exit codes besides 0 (done or drained): 1 on any error, logged.
std::unique_ptr<runtime::ActorBody> make_policy_learner();
std::unique_ptr<runtime::ActorBody> make_rollout_actor();

}  // namespace saccade::workers
