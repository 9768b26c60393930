// c10d's Store for the learners of a job, kept by the coordinator: every
// set/get/add/compareSet/check/deleteKey/getNumKeys/wait of the collective
// library (Gloo's and NCCL's rendezvous) is one StoreQuery sent over the
// learner's authenticated control link (ActorContext::rendezvous_store), so
// no learner serves an open store port. The torch-free side is
// control/rendezvous_store.h; c10d's virtual interface differs between
// LibTorch 1.13 and 2.x (clone(), error types), which the .cpp absorbs.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>

#include "control/rendezvous_store.h"

namespace saccade::learner {

using control::StoreTransport;

// A c10d::Store over `transport`. Every blocking operation waits at most
// `max_timeout` (c10d's "no timeout" included), so nothing waits on the
// store for longer than the config allows; a failed operation throws
// (std::runtime_error on 1.13, c10::DistStoreError on 2.x) with the reason.
c10::intrusive_ptr<c10d::Store> make_coordinator_store(StoreTransport transport,
                                                       std::chrono::milliseconds max_timeout);

}  // namespace saccade::learner
