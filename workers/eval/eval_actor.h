// The eval stage as an actor of the distributed runtime (`saccade run` of a
// job with stage eval): learner 0's slot gets the probe's heads, the
// pretraining checkpoint they name and the policy stage's policy from the
// coordinator, measures them (workers/eval/eval_job.h) and commits eval.json
// as the eval stage's checkpoint (step = the evaluated pretraining step). It
// also writes eval.json in job.work_dir of its node, as `saccade eval` does.
// Restarted after a crash it evaluates again; an eval stage that committed
// its report already is not run again.
#pragma once

#include <memory>

#include "workers/runtime/actor_runtime.h"

namespace saccade::workers {

// Exit codes besides 0 (done, or drained): control::kExitInputRefused when its
// inputs cannot be evaluated (the job fails instead of restarting it), 1 on
// any other error; both logged.
std::unique_ptr<runtime::ActorBody> make_eval_actor();

}  // namespace saccade::workers
