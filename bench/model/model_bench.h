// The model benchmark as a library function, so the CLI can offer
// `saccade bench model` and bench_model is a thin main around it. No torch here.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace saccade::model {

struct ModelBenchOptions {
  int threads = 2;  // at::set_num_threads (LibTorch defaults to 1 here)
  int64_t batch = 32;
  int iters = 3;               // timed iterations per row (median reported), after 1 warm-up
  int64_t foveal_tokens = 31;  // patches per foveal step: 6 multi-zoom + a 5 x 5 grid
  std::vector<std::string> presets{"tiny", "vit_s"};
  bool vit_mode = true;        // also time one ViT-mode step (16 x 16 grid = 256 patches)
  std::string json_path;       // when set, the rows are also written there as JSON
  std::string device = "cpu";  // "cpu" or "cuda[:i]" (needs a LibTorch with CUDA)
  bool bf16 = false;           // model and inputs in bfloat16
};

// Prints a table to `out` and returns 0; throws std::invalid_argument on bad options.
int run_model_bench(const ModelBenchOptions& options, std::ostream& out);

}  // namespace saccade::model
