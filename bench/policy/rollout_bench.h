// `saccade bench rollouts CONFIG`: GRPO rollout throughput over the real
// protocol (ZeroMQ, Cap'n Proto, a new policy version and its weights sent to
// every actor per batch) with 1..N rollout actors, each a RolloutServer on
// its own thread and socket. The backbone is the config's (initial weights,
// on noise images) or simulated: a fixed sleep per trace, so that with more
// actors than cores the protocol's own overhead is what remains visible.
// Torch-free header (the CLI includes it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saccade::bench {

struct RolloutBenchOptions {
  std::string config_path;  // model, views and [policy] (group, steps, batch)
  std::vector<int> actors = {1, 2, 4, 8, 16};
  double trace_ms = 0;        // > 0: the backbone's cost per trace, simulated
  int64_t batches = 6;        // measured per actor count, after one warm-up batch
  int64_t batch_images = 0;   // 0 = policy.batch_size
  int threads_per_actor = 1;  // torch threads of each actor (real backbone)
  std::string json_path;      // also write the figures here
};

// Prints one row per actor count: seconds per batch, traces/s, speed-up over
// one actor and its fraction of linear. Returns 0, or 1 on a failure (printed).
int run_rollout_bench(const RolloutBenchOptions& options);

}  // namespace saccade::bench
