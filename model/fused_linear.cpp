#include "model/fused_linear.h"

#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>

#include "kernels/linear_epilogues.h"
#include "model/device_stream.h"
#include "model/fused_ops.h"

namespace saccade::model {
namespace {

using Gelu = BackboneOptions::Gelu;

// cuBLASLt's products: x and the others of one floating type on one CUDA device, not under
// autocast (the products would run in bfloat16 whatever the tensors' type).
bool fusable_types(const torch::Tensor& x, std::initializer_list<const torch::Tensor*> others) {
  return x.is_cuda() && kernel_operands(x, others);
}

bool needs_grad(std::initializer_list<const torch::Tensor*> inputs) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const torch::Tensor* t : inputs)
    if (t->requires_grad()) return true;
  return false;
}

kernels::LinearGeluShape mlp_shape(const torch::Tensor& x, const torch::Tensor& w1,
                                   const torch::Tensor& w2) {
  return {x.numel() / x.size(-1), static_cast<int>(x.size(-1)), static_cast<int>(w1.size(0)),
          static_cast<int>(w2.size(0)), kernel_float_type(x)};
}

kernels::WeightGradShape linear_shape(const torch::Tensor& x, const torch::Tensor& w) {
  return {x.numel() / x.size(-1), static_cast<int>(x.size(-1)), static_cast<int>(w.size(0)),
          kernel_float_type(x)};
}

bool linear_fusable(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (!FusedScope::current().bias_grad || !fusable_types(x, {&w, &b})) return false;
  if (w.dim() != 2 || b.dim() != 1 || w.size(1) != x.size(-1) || b.size(0) != w.size(0))
    return false;
  return kernels::weight_grad_bias_cuda_supports(linear_shape(x, w), device_index(x.device()));
}

bool mlp_fusable(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                 const torch::Tensor& w2, const torch::Tensor& b2, Gelu gelu) {
  if (!FusedScope::current().mlp || gelu != Gelu::kTanh || !fusable_types(x, {&w1, &b1, &w2, &b2}))
    return false;
  if (w1.dim() != 2 || w2.dim() != 2 || b1.dim() != 1 || b2.dim() != 1) return false;
  if (w1.size(1) != x.size(-1) || b1.size(0) != w1.size(0) || w2.size(1) != w1.size(0) ||
      b2.size(0) != w2.size(0))
    return false;
  return kernels::linear_gelu_cuda_supports(mlp_shape(x, w1, w2), device_index(x.device()));
}

torch::Tensor workspace(const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(kernels::kEpilogueWorkspaceBytes)},
                      like.options().dtype(torch::kUInt8));
}

std::vector<int64_t> with_last(const torch::Tensor& x, int64_t last) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = last;
  return sizes;
}

// d_weight = dy^T x and d_bias = the column sums of dy, of rows [rows, out] and [rows, in]: in
// one product, or as LibTorch's linear backward computes them.
std::pair<torch::Tensor, torch::Tensor> weight_and_bias_grads(const torch::Tensor& dy_rows,
                                                              const torch::Tensor& x_rows,
                                                              bool fused) {
  if (!fused) return {dy_rows.t().mm(x_rows), dy_rows.sum(0)};
  const kernels::WeightGradShape shape{x_rows.size(0), static_cast<int>(x_rows.size(1)),
                                       static_cast<int>(dy_rows.size(1)),
                                       kernel_float_type(x_rows)};
  torch::Tensor d_weight = torch::empty({shape.out, shape.in}, x_rows.options());
  torch::Tensor d_bias = torch::empty({shape.out}, x_rows.options());
  const torch::Tensor space = workspace(x_rows);
  kernels::weight_grad_bias_cuda(
      shape, {dy_rows.data_ptr(), x_rows.data_ptr(), d_weight.data_ptr(), d_bias.data_ptr()},
      space.data_ptr(), kernels::kEpilogueWorkspaceBytes, current_stream(x_rows.device()));
  return {d_weight, d_bias};
}

// h = gelu(x W1^T + b1) of x's rows [rows, in]; `pre` (when defined) receives x W1^T + b1.
torch::Tensor mlp_hidden(const torch::Tensor& x_rows, const torch::Tensor& w1,
                         const torch::Tensor& b1, const torch::Tensor& w2,
                         const torch::Tensor* pre) {
  const kernels::LinearGeluShape shape = mlp_shape(x_rows, w1, w2);
  torch::Tensor h = torch::empty({shape.rows, shape.hidden}, x_rows.options());
  const torch::Tensor space = workspace(x_rows);
  const kernels::LinearGeluForward f{x_rows.data_ptr(), w1.data_ptr(), b1.data_ptr(), h.data_ptr(),
                                     pre != nullptr ? pre->data_ptr() : nullptr};
  kernels::linear_gelu_forward_cuda(shape, f, space.data_ptr(), kernels::kEpilogueWorkspaceBytes,
                                    current_stream(x_rows.device()));
  return h;
}

class MlpGeluFunction : public torch::autograd::Function<MlpGeluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w1_in, const torch::Tensor& b1_in,
                               const torch::Tensor& w2_in, const torch::Tensor& b2) {
    // A custom function's forward runs on whatever device is current: the products launch on
    // it, so it must be x's (a learner on cuda:1).
    const c10::DeviceGuard on(x.device());
    const torch::Tensor x_rows = aligned_rows(x.reshape({-1, x.size(-1)}));
    const torch::Tensor w1 = aligned_rows(w1_in), b1 = aligned_rows(b1_in);
    const torch::Tensor w2 = aligned_rows(w2_in);
    torch::Tensor pre = torch::empty({x_rows.size(0), w1.size(0)}, x_rows.options());
    torch::Tensor h = mlp_hidden(x_rows, w1, b1, w2, &pre);
    torch::Tensor y = at::linear(h, w2, b2);
    ctx->save_for_backward({x_rows, w1, w2, h, pre});
    ctx->saved_data["in_sizes"] = x.sizes().vec();
    // Backward runs outside the forward's scope: it follows the choice made here.
    ctx->saved_data["bias_grad"] =
        FusedScope::current().bias_grad &&
        kernels::weight_grad_bias_cuda_supports(linear_shape(h, w2), device_index(x.device()));
    return y.view(with_last(x, w2.size(0)));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_rows = saved[0], &w1 = saved[1], &w2 = saved[2], &h = saved[3],
                        &pre = saved[4];
    const c10::DeviceGuard on(x_rows.device());
    const torch::Tensor dy = aligned_rows(grads[0].reshape({-1, w2.size(0)}));
    const kernels::LinearGeluShape shape = mlp_shape(x_rows, w1, w2);
    torch::Tensor d_pre = torch::empty_like(pre);
    torch::Tensor d_b1 = torch::empty({shape.hidden}, pre.options());
    const torch::Tensor space = workspace(pre);
    const kernels::LinearGeluBackward b{dy.data_ptr(), w2.data_ptr(), pre.data_ptr(),
                                        d_pre.data_ptr(), d_b1.data_ptr()};
    kernels::linear_gelu_backward_cuda(shape, b, space.data_ptr(), kernels::kEpilogueWorkspaceBytes,
                                       current_stream(pre.device()));
    // The rest as LibTorch's linear layers compute it: the weights' gradients, the second
    // bias's (or both of the second layer's in one product), and the input's.
    auto [d_w2, d_b2] = weight_and_bias_grads(dy, h, ctx->saved_data["bias_grad"].toBool());
    torch::Tensor d_w1 = d_pre.t().mm(x_rows);
    torch::Tensor d_x;
    if (ctx->needs_input_grad(0))
      d_x = d_pre.mm(w1).view(ctx->saved_data["in_sizes"].toIntVector());
    return {d_x, d_w1, d_b1, d_w2, d_b2};
  }
};

// Returns ATen's linear output, a view for inputs of more than two dimensions: LibTorch
// refuses in-place operations on views a custom function returns (none in the model does).
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const c10::DeviceGuard on(x.device());
    ctx->save_for_backward({aligned_rows(x.reshape({-1, x.size(-1)})), weight});
    ctx->saved_data["in_sizes"] = x.sizes().vec();
    return at::linear(x, weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_rows = saved[0], &weight = saved[1];
    const c10::DeviceGuard on(x_rows.device());
    const torch::Tensor dy = aligned_rows(grads[0].reshape({-1, weight.size(0)}));
    auto [d_weight, d_bias] = weight_and_bias_grads(dy, x_rows, true);
    // An input without gradient (patches, a detached state) costs no product, as in ATen.
    torch::Tensor d_x;
    if (ctx->needs_input_grad(0))
      d_x = dy.mm(weight).view(ctx->saved_data["in_sizes"].toIntVector());
    return {d_x, d_weight, d_bias};
  }
};

}  // namespace

torch::Tensor linear_fused(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  if (!needs_grad({&x, &weight, &bias}) || !linear_fusable(x, weight, bias))
    return at::linear(x, weight, bias);
  return LinearFunction::apply(x, weight, bias);
}

torch::Tensor mlp_gelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2, Gelu gelu) {
  if (!mlp_fusable(x, w1, b1, w2, b2, gelu))
    return linear_fused(at::gelu(linear_fused(x, w1, b1), gelu == Gelu::kTanh ? "tanh" : "none"),
                        w2, b2);
  if (needs_grad({&x, &w1, &b1, &w2, &b2})) return MlpGeluFunction::apply(x, w1, b1, w2, b2);
  const c10::DeviceGuard on(x.device());
  const torch::Tensor x_rows = aligned_rows(x.reshape({-1, x.size(-1)}));
  const torch::Tensor h =
      mlp_hidden(x_rows, aligned_rows(w1), aligned_rows(b1), aligned_rows(w2), nullptr);
  return at::linear(h, w2, b2).view(with_last(x, w2.size(0)));
}

}  // namespace saccade::model
