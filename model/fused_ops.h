// Which of the model's operations run as fused kernels, per thread, within a scope. A training
// step opens one around its passes (ssl.fused_add_norm, ssl.fused_mlp, ssl.fused_bias_grad);
// the choice is made in forward, and backward follows it (it runs outside the scope). Outside
// every scope LibTorch's operations run. Each fused operation falls back to LibTorch's where a
// call does not allow it (a type, a device, a width: add_norm.h, fused_linear.h) and gives the
// same values and gradients within float rounding.
#pragma once

namespace saccade::model {

struct FusedOps {
  bool add_norm = false;   // a residual add and the LayerNorm after it (add_norm.h)
  bool mlp = false;        // an MLP with the tanh GELU inside its products (fused_linear.h)
  bool bias_grad = false;  // a linear layer's bias gradient inside its weight's (fused_linear.h)
};

class FusedScope {
 public:
  explicit FusedScope(FusedOps ops);
  ~FusedScope();  // restores the enclosing scope's choice: scopes nest
  FusedScope(const FusedScope&) = delete;
  FusedScope& operator=(const FusedScope&) = delete;

  static const FusedOps& current();  // this thread's

 private:
  FusedOps previous_;
};

}  // namespace saccade::model
