// A tiny persistent worker pool for the kernels' data-parallel loops (table build,
// batched extraction). Persistent because a 100-patch glimpse takes ~100 us, and
// spawning threads per call would cost a good part of that.
#pragma once

#include <functional>

namespace saccade::kernels {

// Number of hardware threads (at least 1).
int hardware_threads();

// Runs task(i) for i in [0, num_tasks) on up to `num_threads` threads (0 = all
// hardware threads), the calling thread included; returns when all are done.
// Re-entrant and thread-safe: when the shared pool is busy (another caller, or a
// nested call), the tasks run inline on the calling thread. The first exception a
// task throws is rethrown here after the other tasks finish.
void parallel_for(int num_threads, int num_tasks, const std::function<void(int)>& task);

}  // namespace saccade::kernels
