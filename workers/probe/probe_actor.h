// The probe stage as an actor of the distributed runtime (`saccade run` of a
// job with stage probe): learner 0's slot probes the teacher of pretraining's
// newest checkpoint, which it gets from the coordinator, and commits the task
// head and the report as the probe stage's checkpoint (step = the probed
// pretraining step), from which the later stages read the head. It also
// writes probe_head.safetensors and probe.json in job.work_dir of its node,
// as `saccade probe` does. Restarted after a crash, it probes again; a probe
// stage that already committed its head is not run again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "workers/probe/probe_job.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::probe {

// Exit codes besides 0 (done, or drained): 1 on any error, logged. `pretrain`
// trains the supervised baseline when probe.baselines asks for it.
std::unique_ptr<runtime::ActorBody> make_probe_actor(PretrainBackbone pretrain);

// The start of a stage that one actor runs and commits once (probe, eval):
// torch threads as assigned, then the rendezvous of a world of one. Returns
// the step the stage committed already (>= 0: nothing left to do), -1 when it
// is to run, nullopt when no rendezvous came (logged unless stopping).
std::optional<int64_t> begin_single_actor_stage(runtime::ActorContext& ctx, const char* stage);

}  // namespace saccade::probe
