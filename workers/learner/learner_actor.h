// The learner actor: sequential-to-global DINO (workers/pretrain/ssl_trainer.h)
// inside the actor runtime. It meets the other learners of its generation in
// a c10d process group (workers/learner/learner_group.h), asks its data
// actors for batches (workers/data_plane/batch_client.h), all-reduces gradients,
// and, as learner 0, streams checkpoints to the coordinator. When a learner
// is lost every learner re-rendezvous under the new generation and resumes
// from the last committed checkpoint; the data position follows from the
// step, so the resumed run sees the same batches.
#pragma once

#include <memory>

#include "workers/runtime/actor_runtime.h"

namespace saccade::learner {

// Exit codes besides 0 (done or drained).
inline constexpr int kLearnerNoRendezvous = 5;  // no rendezvous within rendezvous_timeout_s
inline constexpr int kLearnerNoCheckpoint = 6;  // the checkpoint to resume from did not arrive
inline constexpr int kLearnerFailed = 1;        // any other error, logged

std::unique_ptr<runtime::ActorBody> make_learner_actor();

}  // namespace saccade::learner
