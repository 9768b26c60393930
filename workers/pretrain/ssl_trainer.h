// The learner's training step of sequential-to-global DINO (paper Algorithm 1):
// teacher and student forward passes over one SslBatch, the loss, backward,
// gradient all-reduce (when distributed), clipping, AdamW, EMA teacher.
//
// Torch stays behind the implementation: callers (the pretrain command, the
// learner actor) see plain structs, so they compile without <torch/torch.h>.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataloader/views.h"
#include "workers/ssl/collectives.h"
#include "workers/ssl/trainer_options.h"

namespace at {
class Tensor;
}

namespace saccade::pretrain {

// Where a step's wall time went (seconds). On a CUDA device each phase ends
// with a synchronisation, so the figures are the device's, not launch times.
struct StepPhases {
  double teacher = 0;   // teacher forward: global view and its sequential view
  double student = 0;   // student forward: global, local and sequential views
  double loss = 0;      // targets (centring or Sinkhorn-Knopp) and the loss
  double backward = 0;  // autograd
  double update = 0;    // gradient all-reduce, clipping, AdamW, EMA teacher
  double other = 0;     // views to tensors, statistics
  StepPhases& operator+=(const StepPhases& o);
};

// What one step did, for progress, metrics and tests.
struct StepStats {
  int64_t step = 0;  // the step just taken (0-based)
  double loss = 0, dino = 0, koleo = 0;
  double global = 0, local = 0, sequential = 0;
  double lr = 0, weight_decay = 0, teacher_momentum = 0, teacher_temp = 0;
  double grad_norm = 0;
  double target_entropy = 0;        // mean entropy of the teacher's targets (collapse monitor)
  double target_entropy_ratio = 0;  // target_entropy / ln K: 1 = uniform targets
  int64_t prototypes_used = 0;      // distinct argmax prototypes over the targets
  // Times cutting the views (views.cut_on = "learner") blocked the host until the device
  // caught up (kernels::Extractor::host_waits); 0 on a CPU and when the data plane cuts.
  int64_t cut_host_waits = 0;
  double seconds = 0;         // wall time of the step
  StepPhases phases;          // that wall time by phase (zeros unless time_phases)
  double flop_per_image = 0;  // model FLOPs per image of the step (ssl/step_flops.h)
  int64_t images = 0;         // images of the step on this learner
  double peak_tflops = 0;     // TrainerOptions::peak_tflops
  double tflops() const { return seconds > 0 ? flop_per_image * images / seconds / 1e12 : 0; }
};

// A step's figures as named metrics (metrics.jsonl, the learner's reports).
std::vector<std::pair<std::string, double>> step_metrics(const StepStats& s);

class SslTrainer {
 public:
  // Builds student and teacher (the teacher starts as a copy of the student).
  // With collectives of world_size > 1, Sinkhorn-Knopp and the centre are global and the
  // gradients are averaged over the learners (during backward with
  // options.overlap_all_reduce and collectives.start_sum). Throws std::invalid_argument on
  // bad options.
  explicit SslTrainer(const ssl::TrainerOptions& options, ssl::Collectives collectives = {});
  ~SslTrainer();
  SslTrainer(const SslTrainer&) = delete;
  SslTrainer& operator=(const SslTrainer&) = delete;

  // One optimiser step on `batch` (this learner's share of the global batch). `next`, when
  // known: the batch of the next train_step. A GPU learner with prefetches() copies it to
  // the device while this step runs; it must then stay alive and unchanged until that
  // step, or until forget_next().
  StepStats train_step(const data::SslBatch& batch, const data::SslBatch* next = nullptr);

  // TrainerOptions::prefetch_to_device: callers that can, pass train_step its next batch.
  // (On a CPU learner nothing is copied ahead; the step is the same either way.)
  bool prefetches() const;

  // Drops the copy of a `next` batch that will not be stepped after all (a caller stopping
  // before it), so that a later batch at the same address is not mistaken for it.
  void forget_next();

  // Optimiser steps taken so far (the next train_step's schedule index).
  int64_t step() const;

  // TrainerOptions::time_phases from the next step on (a benchmark's breakdown pass).
  void set_time_phases(bool enabled);

  // Everything a bit-exact resume needs: "student" and "teacher" (safetensors),
  // "optimizer" (AdamW state), "trainer" (step), and with EMA centring "center". load() refuses
  // blobs that do not fit this trainer's shapes, naming the tensor. save() may run on another
  // thread while train_step runs: it then gives the last completed step.
  std::map<std::string, std::string> save() const;
  void load(const std::map<std::string, std::string>& blobs);

  // The teacher's features: its first state token, in fp32. What k-NN checks
  // read (DINO evaluates the teacher). `views` holds `steps` x B views stored
  // step-major (glimpse k of image b is view k * B + b); the state is carried
  // from step to step, and the result is [steps x B x width] row-major, the
  // features after each step. steps = 1: one single-step view per image.
  std::vector<float> teacher_features(const data::PatchBatch& views, int64_t steps = 1) const;

  // The teacher's backbone as safetensors (DINO evaluates the teacher).
  std::string export_backbone() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the models, optimiser and step counter
};

}  // namespace saccade::pretrain
