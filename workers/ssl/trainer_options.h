// What the learner's SSL trainer (workers/pretrain/ssl_trainer.h) is built
// from: a plain struct, filled from the job config by
// workers/job_options/model_options.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/options.h"
#include "workers/ssl/schedules.h"

namespace saccade::ssl {

// How the step's passes compute (ssl.precision).
enum class Precision {
  kFp32,
  // bf16 autocast: matmuls in bf16 from fp32 weights; the residual stream, LayerNorm and
  // the weights stay fp32, so every linear layer casts its input and weight.
  kBf16Autocast,
  // bf16 copies of student and teacher run the forward and backward passes: the residual
  // stream, LayerNorm (accumulating in fp32), LayerScale and the weights are bf16, with no
  // casts. The fp32 modules stay the master weights: gradients are all-reduced, clipped
  // and applied in fp32, the EMA is fp32 and checkpoints hold fp32 (DINOv2's mixed
  // precision: half-precision params, fp32 update). The loss is fp32.
  kBf16Params,
};

struct TrainerOptions {
  model::BackboneOptions backbone;
  model::DinoHeadOptions head;
  ssl::ScheduleOptions schedule;
  double student_temp = 0;
  double koleo_weight = 0;
  double global_weight = 1.0 / 8;          // of the static term; the local views get the rest
  double sequential_weight = 1.0 / 2;      // of the DINO loss; the static term gets the rest
  bool sequential_targets_global = false;  // steps matched to the teacher's global view only
  int64_t sinkhorn_iterations = 0;
  bool ema_centering =
      false;  // DINO's centring (ssl.teacher_centering = "ema"), not Sinkhorn-Knopp
  double center_momentum = 0.9;
  double clip_grad = 0;                    // 0 = no clipping
  std::string device;                      // "cpu" or "cuda:N"
  Precision precision = Precision::kFp32;  // the loss and the update are fp32 in every mode
  uint64_t seed = 0;                       // initial weights
  double peak_tflops = 0;  // the device's peak at this precision (resolved); 0 = unknown, no MFU
  bool multi_tensor_update = true;  // foreach AdamW and EMA (ssl::AdamWSettings::multi_tensor)
  bool overlap_all_reduce = true;   // gradient buckets all-reduced during backward (learners > 1)
  // The student's glimpses after the first in one batched pass with gradient, their carried
  // states from a pass without (ssl.batched_glimpses): the same step, fewer larger kernels.
  bool batched_glimpses = false;
  // The teacher's forward (and with batched_glimpses the student's carried-state pass)
  // replayed as CUDA graphs (ssl.cuda_graphs): CUDA devices, fp32 or bf16-params only.
  bool cuda_graphs = false;
  // Each residual add and the LayerNorm after it as one fused operation in the step's passes
  // (ssl.fused_add_norm, model::FusedOps): the same step within float rounding.
  bool fused_add_norm = false;
  // On a GPU, the blocks' MLPs with the GELU inside their products (ssl.fused_mlp; needs the
  // backbone's tanh GELU): the same step within float rounding.
  bool fused_mlp = false;
  // On a GPU, each linear layer's bias gradient inside its weight gradient's product
  // (ssl.fused_bias_grad): the same step within float rounding.
  bool fused_bias_grad = false;
  // The next step's batch copied to the device while a step runs (ssl.prefetch_to_device):
  // CUDA devices; on a CPU the training loop still reads one batch ahead.
  bool prefetch_to_device = false;
  // Per channel: the device normalises patches as (value / 255 - mean) / std.
  // One value per backbone channel.
  std::vector<float> pixel_mean, pixel_std;
  // Per-phase wall times (StepStats::phases). On a GPU each phase then ends with a device
  // synchronisation; measured on an H200 it costs nothing visible (docs/model.md).
  bool time_phases = true;
  // The labelled baseline: one-hot labels replace the teacher's targets (the
  // head's K must be the number of classes); the teacher is then only the EMA.
  bool supervised = false;
};

}  // namespace saccade::ssl
