// The student's optimiser and the teacher's EMA, as in DINOv2: AdamW with
// decay / no-decay parameter groups, per-step lr and weight decay from the
// schedules, gradient clipping, last-layer freezing, teacher momentum update.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "workers/ssl/schedules.h"

namespace torch::nn {
class Module;
}

namespace saccade::ssl {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

// module.named_parameters(recurse) in registration order, trainable or not.
NamedParameters named_parameters(const torch::nn::Module& module);

// No weight decay (DINO/DINOv2): any parameter with ndim <= 1; names ending in
// ".bias" or containing "norm" (LayerNorms) or "gamma" (LayerScale), as
// DINOv2's get_params_groups_with_decay; and the learned tokens/embeddings
// "state_embed", "pos_embed", "cls_token", "register_tokens", "mask_token"
// (timm's no_weight_decay(); state_embed is 2-D so the shape rule misses it).
// The (x, y, z) positional MLP "pos_mlp" is ordinary Linear layers: its
// weights decay, its biases do not.
bool exempt_from_weight_decay(const std::string& name, const at::Tensor& parameter);
// The head's prototypes: any dot-separated name component "last_layer".
bool is_last_layer(const std::string& name);

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // The update as a few multi-tensor (foreach) kernels per parameter group instead
  // of ~8 kernels per parameter: the same arithmetic (tested bit-exact on the CPU),
  // far fewer launches on a GPU. false: libtorch's AdamW::step, parameter by parameter.
  bool multi_tensor = true;
};

// AdamW over every parameter of `named` (frozen ones included: libtorch skips
// a parameter while its grad is undefined), in up to four groups: {decay,
// no decay} x {last layer, rest}. Owns the torch optimiser.
class StudentOptimizer {
 public:
  explicit StudentOptimizer(const NamedParameters& named, const AdamWSettings& settings = {});
  ~StudentOptimizer();
  StudentOptimizer(const StudentOptimizer&) = delete;
  StudentOptimizer& operator=(const StudentOptimizer&) = delete;

  // lr of every group (last_layer_lr for the last layer's), weight decay of
  // the decay groups (0 for the others).
  void apply_schedule(const ScheduleValues& values);
  // One AdamW update with the grads as they are (clip and cancel first).
  void step();
  void zero_grad();  // grads -> undefined

  const std::vector<std::string>& decay_names() const;
  const std::vector<std::string>& no_decay_names() const;
  double group_lr(bool last_layer, bool decay) const;  // for tests and logging
  double group_weight_decay(bool last_layer, bool decay) const;

  // The AdamW state (moments and step counts) as bytes, and back. load()
  // requires an optimiser over the same parameters in the same order; it does
  // NOT restore lr / weight decay (libtorch 1.13 keeps the current options):
  // call apply_schedule(schedule_at(step)) before the next step(), as every
  // step does anyway. Throws std::runtime_error when the bytes do not fit.
  std::string save() const;
  void load(const std::string& bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the torch::optim::AdamW
};

// Scales the grads of `parameters` so their total L2 norm is at most
// max_norm (torch clip_grad_norm_); returns the norm before clipping, a 0-dim fp32 tensor
// on the grads' device (zero without grads). It does not wait for the device: reading the
// norm is the caller's synchronisation. max_norm <= 0 disables clipping (the norm is still
// returned). multi_tensor: one multi-tensor norm and scale over all grads (as
// MultiTensorUpdate), else one norm and one scale per grad, as libtorch's clip_grad_norm_.
at::Tensor clip_grad_norm(const NamedParameters& parameters, double max_norm,
                          bool multi_tensor = false);

// While the last layer is frozen: drop the grads of every is_last_layer()
// parameter, so AdamW leaves it (and its moments) untouched, as DINO's
// cancel_gradients_last_layer. Returns how many grads were dropped.
int64_t cancel_last_layer_grads(const NamedParameters& parameters);

// teacher = momentum * teacher + (1 - momentum) * student, in place and
// without grad, over parameters matched by position. Throws
// std::invalid_argument when counts, names or shapes differ or momentum is
// outside [0, 1].
// multi_tensor: two foreach kernels over all parameters (the same arithmetic).
void ema_update(const NamedParameters& teacher, const NamedParameters& student, double momentum,
                bool multi_tensor = false);

}  // namespace saccade::ssl
