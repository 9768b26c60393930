#include "model/add_norm.h"

#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>

#include "kernels/layer_norm.h"
#include "model/device_stream.h"
#include "model/fused_ops.h"

namespace saccade::model {
namespace {

kernels::NormShape shape_of(const torch::Tensor& rows) {
  return {rows.numel() / rows.size(-1), static_cast<int>(rows.size(-1)), kernel_float_type(rows)};
}

bool fusable(const torch::Tensor& x, const torch::Tensor& branch,
             const torch::nn::LayerNorm& norm) {
  // (Under autocast LibTorch's layer_norm runs in, and returns, float32 whatever its input.)
  const torch::Tensor& gamma = norm->weight;
  const torch::Tensor& beta = norm->bias;
  if (!FusedScope::current().add_norm || !kernel_operands(x, {&branch, &gamma, &beta}))
    return false;
  if (norm->options.normalized_shape().size() != 1) return false;
  if (branch.sizes() != x.sizes() || gamma.numel() != x.size(-1)) return false;
  if (x.is_cuda()) return kernels::add_layer_norm_cuda_supports(shape_of(x));
  return x.is_cpu();
}

class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x_in,
                                                const torch::Tensor& branch_in,
                                                const torch::Tensor& gamma_in,
                                                const torch::Tensor& beta_in, double eps) {
    // A custom function's forward runs on whatever device is current: the kernels launch on
    // it, so it must be x's (a learner on cuda:1).
    const c10::DeviceGuard on(x_in.device());
    // An unused output's gradient stays undefined instead of a tensor of zeros to read.
    ctx->set_materialize_grads(false);
    const torch::Tensor x = aligned_rows(x_in), branch = aligned_rows(branch_in);
    const torch::Tensor gamma = aligned_rows(gamma_in), beta = aligned_rows(beta_in);
    const kernels::NormShape shape = shape_of(x);
    torch::Tensor sum = torch::empty_like(x), normed = torch::empty_like(x);
    const auto stats = x.options().dtype(torch::kFloat);
    torch::Tensor mean = torch::empty({shape.rows}, stats),
                  rstd = torch::empty({shape.rows}, stats);
    const kernels::AddNormForward f{
        x.data_ptr(),   branch.data_ptr(), gamma.data_ptr(),       beta.data_ptr(),
        sum.data_ptr(), normed.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>()};
    if (x.is_cuda())
      kernels::add_layer_norm_forward_cuda(shape, f, static_cast<float>(eps),
                                           current_stream(x.device()));
    else
      kernels::add_layer_norm_forward(shape, f, static_cast<float>(eps), torch::get_num_threads());
    ctx->save_for_backward({sum, mean, rstd, gamma});
    return {sum, normed};
  }

  // grads: of sum (along the residual stream; undefined when nothing used it) and of normed.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &sum = saved[0], &mean = saved[1], &rstd = saved[2], &gamma = saved[3];
    const c10::DeviceGuard on(sum.device());
    if (!grads[1].defined()) {  // only the residual stream's gradient: the add's
      const torch::Tensor d_sum = grads[0].defined() ? grads[0] : torch::zeros_like(sum);
      return {d_sum, d_sum, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor dy = aligned_rows(grads[1]);
    const torch::Tensor d_sum = grads[0].defined() ? aligned_rows(grads[0]) : torch::Tensor();
    const kernels::NormShape shape = shape_of(sum);
    torch::Tensor dx = torch::empty_like(sum);
    torch::Tensor d_gamma = torch::empty_like(gamma), d_beta = torch::empty_like(gamma);
    const kernels::AddNormBackward b{
        dy.data_ptr(),          sum.data_ptr(),     mean.data_ptr<float>(),
        rstd.data_ptr<float>(), gamma.data_ptr(),   d_sum.defined() ? d_sum.data_ptr() : nullptr,
        dx.data_ptr(),          d_gamma.data_ptr(), d_beta.data_ptr()};
    if (sum.is_cuda()) {
      torch::Tensor scratch =
          torch::empty({static_cast<int64_t>(kernels::add_layer_norm_scratch_floats(shape))},
                       sum.options().dtype(torch::kFloat));
      kernels::add_layer_norm_backward_cuda(shape, b, scratch.data_ptr<float>(),
                                            current_stream(sum.device()));
    } else {
      kernels::add_layer_norm_backward(shape, b, torch::get_num_threads());
    }
    return {dx, dx, d_gamma, d_beta, torch::Tensor()};
  }
};

}  // namespace

AddNormOutput add_layer_norm(const torch::Tensor& x, const torch::Tensor& branch,
                             torch::nn::LayerNorm norm) {
  if (!fusable(x, branch, norm)) {
    torch::Tensor sum = branch.defined() ? x + branch : x;
    torch::Tensor normed = norm(sum);
    return {std::move(sum), std::move(normed)};
  }
  const torch::autograd::variable_list out =
      AddLayerNormFunction::apply(x, branch, norm->weight, norm->bias, norm->options.eps());
  return {out[0], out[1]};
}

}  // namespace saccade::model
