// The torch side of the CLI, built as a shared library (libsaccade_torch.so)
// that the saccade binary loads only for commands that need LibTorch. The
// coordinator, agents, status and config commands never load torch: they
// start in milliseconds instead of the ~0.7 s LibTorch's ~300 libraries cost,
// which matters for a process that a cluster starts and restarts.
#pragma once

#include <cstdint>

#include "bench/learner/allreduce_bench.h"
#include "bench/learner/step_bench.h"
#include "bench/model/model_bench.h"
#include "bench/policy/rollout_bench.h"

namespace saccade::cli {

struct PretrainArgs {
  const char* config_path = nullptr;
  int64_t steps = -1;
  bool fresh = false;
  const char* log_level = "";
  const char* log_dir = "";
};

struct ExportArgs {
  const char* config_path = nullptr;
  int64_t step = -1;     // -1: the newest committed checkpoint
  const char* out = "";  // "": job.work_dir/backbone.safetensors
};

struct ProbeArgs {
  const char* config_path = nullptr;
  int64_t step = -1;               // -1: the newest committed checkpoint
  bool random_init = false;        // --init random: the backbone's initial weights
  const char* backbone_path = "";  // --backbone FILE: this safetensors backbone instead
  int64_t max_train_images = 0;
  int64_t max_val_images = 0;
  const char* log_level = "";
};

struct PolicyArgs {
  const char* config_path = nullptr;
  int64_t max_train_images = 0;
  int64_t max_val_images = 0;
  const char* log_level = "";
};

struct EvalArgs {
  const char* config_path = nullptr;
  int64_t max_images = 0;        // overrides eval.images when > 0
  int64_t max_sweep_images = 0;  // overrides eval.sweep_images when > 0
  const char* log_level = "";
};

}  // namespace saccade::cli

namespace saccade::runtime {
class ActorBody;
}

// Entry points resolved with dlsym; each returns the process exit code and
// reports its own errors on stderr.
extern "C" {
int saccade_torch_pretrain(const saccade::cli::PretrainArgs* args);
int saccade_torch_bench_model(const saccade::model::ModelBenchOptions* options);
int saccade_torch_bench_allreduce(const saccade::bench::AllreduceBenchOptions* options);
int saccade_torch_bench_step(const saccade::bench::StepBenchOptions* options);
int saccade_torch_bench_rollouts(const saccade::bench::RolloutBenchOptions* options);
int saccade_torch_export(const saccade::cli::ExportArgs* args);
int saccade_torch_probe(const saccade::cli::ProbeArgs* args);
int saccade_torch_policy(const saccade::cli::PolicyArgs* args);
int saccade_torch_eval(const saccade::cli::EvalArgs* args);
// A new body for `role` (a wire::Role) that needs LibTorch, or nullptr. The
// caller owns it (deleting through the virtual destructor).
saccade::runtime::ActorBody* saccade_torch_make_body(int role);
}

namespace saccade::cli {

// The entry point `name` of libsaccade_torch.so (next to the running binary),
// loaded on first use with OMP_WAIT_POLICY=passive unless the user set a
// policy (libgomp reads it when it loads: its default spinning workers steal
// the cores OpenBLAS needs; torch steps measured 4-5x slower on 2 cores).
// Throws std::runtime_error with dlerror()'s reason.
void* torch_entry(const char* name);

}  // namespace saccade::cli
