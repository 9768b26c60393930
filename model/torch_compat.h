// The one place where LibTorch versions differ for the model.
// Fused attention: LibTorch >= 2.0 has torch::scaled_dot_product_attention
// (flash / memory-efficient kernels where available); Debian's 1.13 does not,
// so it gets the plain softmax(Q K^T / sqrt(d)) V, which is what 2.x's math
// backend computes. Autocast: 2.4 made its switches per device type. Scaling a list
// of tensors by a tensor in one multi-tensor kernel: 2.1; copying a list: 2.2.
#pragma once

#include <ATen/autocast_mode.h>

#include <cmath>

#include <torch/torch.h>

namespace saccade::model {

// softmax(Q K^T / sqrt(d)) V; q, k, v: [B, heads, N, head_dim] -> the same; no mask,
// no dropout. (Not named scaled_dot_product_attention: at:: has one, found by ADL.)
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return torch::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  return torch::matmul(torch::softmax(scores, -1), v);
#endif
}

// Fused attention kernels (flash, memory-efficient, cuDNN) allowed or not, for the
// whole process: off leaves scaled_dot_product_attention its math backend, for A/B
// measurements. A no-op on 1.13, which has only the plain path.
inline void set_fused_attention(bool enabled) {
#if TORCH_VERSION_MAJOR >= 2
  auto& context = at::globalContext();
  context.setSDPUseFlash(enabled);
  context.setSDPUseMemEfficient(enabled);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
  context.setSDPUseCuDNN(enabled);
#endif
#else
  (void)enabled;
#endif
}

// Whether autocast is on for `device` on this thread.
inline bool autocast_enabled(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

// bf16 mixed precision for a scope on one device type (what Python's
// torch.autocast does): ops on autocast's lower-precision list (matmul, linear,
// conv) run in bf16, the rest in fp32; parameters and their gradients stay fp32.
// Disabled: nothing changes. Restores the previous state when it goes.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = autocast_enabled(device_);
    previous_dtype_ = dtype();
    set(true, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(was_enabled_, previous_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::ScalarType dtype() const {
    return at::autocast::get_autocast_dtype(device_);
  }
  void set(bool on, at::ScalarType type) const {
    at::autocast::set_autocast_enabled(device_, on);
    at::autocast::set_autocast_dtype(device_, type);
  }
#else
  bool cpu() const {
    return device_ == c10::DeviceType::CPU;
  }
  at::ScalarType dtype() const {
    return cpu() ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
  }
  void set(bool on, at::ScalarType type) const {
    if (cpu()) {
      at::autocast::set_cpu_enabled(on);
      at::autocast::set_autocast_cpu_dtype(type);
    } else {
      at::autocast::set_enabled(on);
      at::autocast::set_autocast_gpu_dtype(type);
    }
  }
#endif
  c10::DeviceType device_;
  bool enabled_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

// Multiplies every tensor of `tensors` in place by the 0-dim tensor `scale`, which stays on
// the device (no read of it by the host): one multi-tensor kernel where LibTorch has it.
inline void foreach_mul_(std::vector<torch::Tensor>& tensors, const torch::Tensor& scale) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_mul_(tensors, scale);
#else
  for (torch::Tensor& t : tensors) t.mul_(scale);
#endif
}

// Copies every tensor of `src` into the tensor of `dst` at the same index (dtypes may
// differ, shapes may not): multi-tensor kernels where LibTorch has them.
inline void foreach_copy_(const std::vector<torch::Tensor>& dst,
                          const std::vector<torch::Tensor>& src) {
  if (dst.empty()) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  at::_foreach_copy_(dst, src);
#else
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

}  // namespace saccade::model
