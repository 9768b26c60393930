// `saccade bench step CONFIG`: the full sequential-to-global training step of the
// config (teacher forward, student global/local/sequential forwards, loss, backward,
// update, EMA) on batches of the config's views cut from noise images, on one device.
// Reports images/s, model TFLOP/s, MFU and the time per phase, per variant of the
// step's levers, with every variant's losses on the same batches from the same
// initial weights (so a faster variant is checked to train the same). Torch-free
// header: the CLI fills the options, the torch plugin runs them.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace saccade::bench {

struct StepBenchOptions {
  std::string config_path;
  std::string device = "cpu";    // "cpu" or "cuda[:i]"
  std::vector<int64_t> batches;  // images per step; empty = the config's batch per learner
  // Levers, one variant each, e.g. "fp32", "bf16+sdpa+foreach": a precision (fp32 | bf16 |
  // bf16-params, as ssl.precision; fp32 when none is named), "sdpa" (fused attention kernels,
  // LibTorch >= 2), "foreach" (multi-tensor AdamW and EMA), "fold" (LayerScale folded into the
  // linear layer before it, model::set_folded_layerscale), "addnorm" (each residual add and
  // the LayerNorm after it as one fused operation, ssl.fused_add_norm), "tanh" (the blocks'
  // MLPs with the tanh GELU, model.gelu), "mlp" (tanh, and on a GPU the GELU inside the MLPs'
  // products, ssl.fused_mlp), "bgrad" (the linear layers' bias gradients inside their weight
  // gradients' products, ssl.fused_bias_grad), "sync" (a device
  // synchronisation after every phase, as when phases are timed), "cut" (the batches carry the
  // images and boxes and the trainer cuts the views on its device, views.cut_on = "learner"; the
  // same views), "batched" (the student's glimpses 2..S in one pass, ssl.batched_glimpses),
  // "graphs" (the teacher's forward as one CUDA graph, ssl.cuda_graphs). Empty: one variant, the
  // config's training path (its precision, views.cut_on, batched_glimpses and cuda_graphs, every
  // lever on).
  std::vector<std::string> variants;
  int warmup = 2;          // untimed steps per variant and batch
  int steps = 5;           // timed steps (no phase synchronisation)
  int phase_steps = 2;     // then steps timed per phase (synchronised on a GPU)
  double peak_tflops = 0;  // > 0 overrides ssl.peak_tflops and the device table
  int threads = 0;         // torch threads; 0 = the config's ssl.threads
  int image_width = 500;   // the noise images the views are cut from (ImageNet's median)
  int image_height = 375;
  std::string json_path;  // also write the rows here, rewritten as each variant ends
  // With json_path: keep the rows that file holds (a run of the same options the device lost
  // or a fault killed) and measure only the variants and batches it lacks; the one it was
  // measuring when it ended stays a failed row. Losses compare with the batch's first row.
  bool resume = false;
  // > 0: a variant still running after this many seconds ends the process with
  // kStepBenchDeviceLost (a hung lever costs only itself; `resume` measures the rest).
  double variant_timeout_s = 0;
  // A Kineto trace (Chrome JSON: CPU ops and device kernels) of one more step of the
  // last variant at the last batch, written here (LibTorch >= 2 only).
  std::string profile_path;
  // After the variants at each batch: the step's matrix products alone at the last
  // variant's shapes and precision, each timed `steps` times (step_products_bench.h).
  bool products = false;
};

// The exit code when a variant left the GPU's context unusable (a fault in a kernel) or ran
// past variant_timeout_s: the rows so far are written, and a rerun with `resume` measures
// the rest (EX_TEMPFAIL).
inline constexpr int kStepBenchDeviceLost = 75;

// Prints a table to `out`; returns 0, or kStepBenchDeviceLost. Throws std::invalid_argument
// on bad options and saccade::ConfigError on a refused config.
int run_step_bench(const StepBenchOptions& options, std::ostream& out);

}  // namespace saccade::bench
