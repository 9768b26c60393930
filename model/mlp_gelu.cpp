#include "model/mlp_gelu.h"

#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>

#include "kernels/linear_gelu.h"
#include "model/device_stream.h"
#include "model/fused_ops.h"
#include "model/torch_compat.h"

namespace saccade::model {
namespace {

using Gelu = BackboneOptions::Gelu;

kernels::LinearGeluShape shape_of(const torch::Tensor& x, const torch::Tensor& w1,
                                  const torch::Tensor& w2) {
  return {x.numel() / x.size(-1), static_cast<int>(x.size(-1)), static_cast<int>(w1.size(0)),
          static_cast<int>(w2.size(0)),
          x.scalar_type() == torch::kBFloat16 ? kernels::FloatType::kBFloat16
                                              : kernels::FloatType::kFloat32};
}

bool fusable(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
             const torch::Tensor& w2, const torch::Tensor& b2, Gelu gelu) {
  if (!FusedScope::current().mlp || gelu != Gelu::kTanh || !x.is_cuda() || x.dim() < 1)
    return false;
  if (autocast_enabled(x.device().type())) return false;  // the products would run in bf16
  const auto type = x.scalar_type();
  if (type != torch::kFloat && type != torch::kBFloat16) return false;
  for (const torch::Tensor* t : {&w1, &b1, &w2, &b2})
    if (!t->defined() || t->scalar_type() != type || t->device() != x.device()) return false;
  if (w1.dim() != 2 || w2.dim() != 2 || b1.dim() != 1 || b2.dim() != 1) return false;
  if (w1.size(1) != x.size(-1) || b1.size(0) != w1.size(0) || w2.size(1) != w1.size(0) ||
      b2.size(0) != w2.size(0) || x.numel() == 0)
    return false;
  return kernels::linear_gelu_cuda_supports(shape_of(x, w1, w2), device_index(x.device()));
}

torch::Tensor workspace(const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(kernels::kLinearGeluWorkspaceBytes)},
                      like.options().dtype(torch::kUInt8));
}

// h = gelu(x W1^T + b1) of x's rows [rows, in]; `pre` (when defined) receives x W1^T + b1.
torch::Tensor hidden(const torch::Tensor& x_rows, const torch::Tensor& w1, const torch::Tensor& b1,
                     const torch::Tensor& w2, const torch::Tensor* pre) {
  const kernels::LinearGeluShape shape = shape_of(x_rows, w1, w2);
  torch::Tensor h = torch::empty({shape.rows, shape.hidden}, x_rows.options());
  const torch::Tensor space = workspace(x_rows);
  const kernels::LinearGeluForward f{x_rows.data_ptr(), w1.data_ptr(), b1.data_ptr(), h.data_ptr(),
                                     pre != nullptr ? pre->data_ptr() : nullptr};
  kernels::linear_gelu_forward_cuda(shape, f, space.data_ptr(), kernels::kLinearGeluWorkspaceBytes,
                                    current_stream(x_rows.device()));
  return h;
}

std::vector<int64_t> out_sizes(const torch::Tensor& x, int64_t out) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out;
  return sizes;
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
    torch::Tensor h = hidden(x_rows, w1, b1, w2, &pre);
    torch::Tensor y = at::linear(h, w2, b2);
    ctx->save_for_backward({x_rows, w1, w2, h, pre});
    ctx->saved_data["in_sizes"] = x.sizes().vec();
    return y.view(out_sizes(x, w2.size(0)));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_rows = saved[0], &w1 = saved[1], &w2 = saved[2], &h = saved[3],
                        &pre = saved[4];
    const c10::DeviceGuard on(x_rows.device());
    const torch::Tensor dy = aligned_rows(grads[0].reshape({-1, w2.size(0)}));
    const kernels::LinearGeluShape shape = shape_of(x_rows, w1, w2);
    torch::Tensor d_pre = torch::empty_like(pre);
    torch::Tensor d_b1 = torch::empty({shape.hidden}, pre.options());
    const torch::Tensor space = workspace(pre);
    const kernels::LinearGeluBackward b{dy.data_ptr(), w2.data_ptr(), pre.data_ptr(),
                                        d_pre.data_ptr(), d_b1.data_ptr()};
    kernels::linear_gelu_backward_cuda(shape, b, space.data_ptr(),
                                       kernels::kLinearGeluWorkspaceBytes,
                                       current_stream(pre.device()));
    // The rest as LibTorch's linear layers compute it: the weights' gradients, the second
    // bias's, and the input's.
    torch::Tensor d_w2 = dy.t().mm(h), d_b2 = dy.sum(0);
    torch::Tensor d_w1 = d_pre.t().mm(x_rows);
    torch::Tensor d_x = d_pre.mm(w1).view(ctx->saved_data["in_sizes"].toIntVector());
    return {d_x, d_w1, d_b1, d_w2, d_b2};
  }
};

}  // namespace

torch::Tensor mlp_gelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2, Gelu gelu) {
  if (!fusable(x, w1, b1, w2, b2, gelu))
    return at::linear(at::gelu(at::linear(x, w1, b1), gelu == Gelu::kTanh ? "tanh" : "none"), w2,
                      b2);
  const bool needs_grad = torch::GradMode::is_enabled() &&
                          (x.requires_grad() || w1.requires_grad() || b1.requires_grad() ||
                           w2.requires_grad() || b2.requires_grad());
  if (needs_grad) return MlpGeluFunction::apply(x, w1, b1, w2, b2);
  const c10::DeviceGuard on(x.device());
  const torch::Tensor x_rows = aligned_rows(x.reshape({-1, x.size(-1)}));
  const torch::Tensor h =
      hidden(x_rows, aligned_rows(w1), aligned_rows(b1), aligned_rows(w2), nullptr);
  return at::linear(h, w2, b2).view(out_sizes(x, w2.size(0)));
}

}  // namespace saccade::model
