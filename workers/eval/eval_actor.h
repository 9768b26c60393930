// The eval stage on the distributed runtime (`saccade run` of a job with stage
// eval). Its leader, in learner 0's slot, gets the probe's heads, the
// pretraining checkpoint they name and the policy stage's policy from the
// coordinator, measures them (workers/eval/eval_job.h) and commits eval.json
// as the eval stage's checkpoint (step = the evaluated pretraining step); it
// also writes eval.json in job.work_dir of its node, as `saccade eval` does.
// The glimpse traces of the gaze modes (random, scan, policy, at every scale
// of the sweep) are split across the stage's eval actors when
// cluster.nodes[].eval_actors places some (make_eval_actor,
// workers/policy/policy_actors.h); a killed one is restarted and its part
// re-sent. The ViT modes run in the leader. Restarted after a crash the
// leader evaluates again; an eval stage that committed its report already is
// not run again.
#pragma once

#include <memory>

#include "workers/runtime/actor_runtime.h"

namespace saccade::eval {

// Exit codes besides 0 (done, or drained): control::kExitInputRefused when its
// inputs cannot be evaluated (the job fails instead of restarting it), 1 on
// any other error; both logged.
std::unique_ptr<runtime::ActorBody> make_eval_leader();

}  // namespace saccade::eval
