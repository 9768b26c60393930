// `saccade bench allreduce`: gradient all-reduce through the learners' own c10d
// group (workers/learner/learner_group.h), in real processes: Gloo on CPU, NCCL on
// GPUs. Checks the sums and prints time, algorithm and bus bandwidth per size.
// Torch-free header: the CLI fills the options, the torch plugin runs them.
#pragma once

#include <string>
#include <vector>

namespace saccade::bench {

struct AllreduceBenchOptions {
  int world_size = 2;
  std::string device = "cpu";  // "cpu": Gloo; "cuda": NCCL, rank r on GPU r % devices
  std::vector<double> megabytes = {1, 16, 64};  // float32 tensor sizes
  int iterations = 10;                          // timed all-reduces per size (after 2 warm-up)
  std::string store_host = "127.0.0.1";
  int store_port = 29611;
  int timeout_s = 120;
  std::string json_path;  // written by rank 0; empty = none
  int rank = -1;          // -1: the launcher, which starts world_size rank processes
};

// Launcher: starts the ranks (this executable, `bench allreduce --rank r ...`), waits
// for all of them (killing the rest when one fails or the timeout passes) and returns
// 0 when every rank succeeded. A rank: joins, measures, checks; returns 0 or 1.
int run_allreduce_bench(const AllreduceBenchOptions& options);

}  // namespace saccade::bench
