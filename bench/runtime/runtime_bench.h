// `saccade bench runtime CONFIG`: what the distributed runtime costs.
//
// From one job config it derives variants (work dir, nodes, batch, steps
// rewritten; everything else kept) and runs each as real processes:
//   * throughput: `saccade pretrain` (one process) vs `saccade run` with one
//     learner, and 1 learner x batch 2b vs 2 learners x batch b; steady-state
//     images/s from the job's metrics.jsonl (the first quarter of the steps
//     is warm-up and not counted);
//   * recovery: kill -9 of learner 1 in a 2-learner `saccade run`, then the
//     time until the coordinator opens a new generation and until the first
//     step of that generation is reported;
//   * data path (in process, real sockets on loopback): batches/s of remote
//     data actors vs the local loader with the same threads, and the
//     request-to-batch latency with one request in flight;
//   * feed (when feed_actors is set): `saccade run` with one learner on
//     `device` and 1, 2, 4, ... data actors of one loader thread each, on
//     generated ImageNet-size JPEGs in tar shards, against the same trainer fed
//     from memory (`saccade bench step` of the same config and batch): images/s,
//     their share of the memory-fed rate, the learner's data-wait share, wire
//     MB/s and the host cores the job used.
// Prints a table and optionally writes JSON. Torch-free: it starts the torch
// commands as child processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saccade::bench {

struct RuntimeBenchOptions {
  std::string config_path;
  int64_t steps = 60;                // optimiser steps per throughput run
  std::string work_root;             // variants' work dirs and logs; empty: a fresh temp folder
  std::string json_path;             // also write the figures here when set
  int data_batches = 40;             // batches per data-path measurement
  bool throughput = true;            // the four throughput runs
  bool recovery = true;              // the kill -9 run
  bool data_path = true;             // the in-process data path
  std::vector<int64_t> feed_actors;  // data-actor counts of the feed runs; empty = none
  int feed_images = 2000;            // generated 500 x 375 JPEGs in shards; 0 = the config's data
  std::string device = "cpu";        // the feed runs' learner: cpu or cuda (its first GPU)
  int run_timeout_s = 1800;          // a run still going after this is killed (exit -1), and
                                     // the next goes on: a hung run costs only itself
};

// Returns 0 when every run completed, 1 otherwise (the table says which).
// Throws saccade::ConfigError for a config that does not load.
int run_runtime_bench(const RuntimeBenchOptions& options);

}  // namespace saccade::bench
