#include "workers/ssl/objective.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace saccade::ssl {
namespace {

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void expect_shape(const at::Tensor& t, const std::string& name, int64_t dim,
                  const std::string& expected) {
  if (!t.defined() || t.dim() != dim)
    throw std::invalid_argument(name + " must be " + expected + ", got " + shape_of(t));
}

void expect_positive(double value, const std::string& name) {
  if (!(value > 0))
    throw std::invalid_argument(name + " must be > 0, got " + std::to_string(value));
}

}  // namespace

at::Tensor sinkhorn_knopp(const at::Tensor& teacher_logits, double teacher_temp,
                          const SinkhornOptions& options) {
  expect_shape(teacher_logits, "sinkhorn_knopp teacher_logits", 2, "[B, K]");
  expect_positive(teacher_temp, "sinkhorn_knopp teacher_temp");
  if (teacher_logits.size(0) < 1 || teacher_logits.size(1) < 1)
    throw std::invalid_argument("sinkhorn_knopp teacher_logits must be non-empty, got " +
                                shape_of(teacher_logits));
  if (options.iterations < 1)
    throw std::invalid_argument("sinkhorn_knopp iterations must be >= 1, got " +
                                std::to_string(options.iterations));
  const bool distributed = static_cast<bool>(options.all_reduce_sum);
  if (options.subtract_max && distributed && !options.all_reduce_max)
    throw std::invalid_argument(
        "sinkhorn_knopp subtract_max with all_reduce_sum needs all_reduce_max too");

  torch::NoGradGuard no_grad;
  at::Tensor logits = teacher_logits.detach().to(torch::kFloat);
  if (options.subtract_max) {
    at::Tensor max_per_prototype = std::get<0>(logits.max(0));  // [K]
    if (distributed) options.all_reduce_max(max_per_prototype);
    logits = logits - max_per_prototype;
  }
  at::Tensor q = torch::exp(logits / teacher_temp).t();  // [K, B_local]
  const int64_t prototypes = q.size(0);
  at::Tensor batch = torch::full({1}, static_cast<double>(q.size(1)), q.options());
  if (distributed) options.all_reduce_sum(batch);

  at::Tensor sum_q = q.sum();
  if (distributed) options.all_reduce_sum(sum_q);
  q /= sum_q;
  for (int64_t it = 0; it < options.iterations; ++it) {
    // Each prototype's total weight must be 1/K (over all learners).
    at::Tensor sum_of_rows = q.sum(1, /*keepdim=*/true);
    if (distributed) options.all_reduce_sum(sum_of_rows);
    q /= sum_of_rows;
    q /= prototypes;
    // Each sample's total weight must be 1/B.
    q /= q.sum(0, /*keepdim=*/true);
    q /= batch;
  }
  q *= batch;  // columns sum to 1: an assignment per sample
  return q.t();
}

at::Tensor koleo_loss(const at::Tensor& x) {
  expect_shape(x, "koleo_loss input", 2, "[B, D]");
  if (x.size(0) < 2)
    throw std::invalid_argument("koleo_loss needs a batch of at least 2, got " + shape_of(x));
  namespace F = torch::nn::functional;
  const at::Tensor normed =
      F::normalize(x.to(torch::kFloat), F::NormalizeFuncOptions().p(2).dim(-1).eps(1e-8));
  at::Tensor nearest;
  {
    torch::NoGradGuard no_grad;
    at::Tensor dots = torch::mm(normed, normed.t());
    dots.fill_diagonal_(-1);  // never one's own neighbour
    nearest = dots.argmax(1);
  }
  const at::Tensor distances =
      torch::pairwise_distance(normed, normed.index_select(0, nearest), 2, 1e-8);
  return -torch::log(distances + 1e-8).mean();
}

at::Tensor centred_softmax(const at::Tensor& teacher_logits, const at::Tensor& center,
                           double teacher_temp) {
  expect_shape(teacher_logits, "centred_softmax teacher_logits", 2, "[B, K]");
  expect_positive(teacher_temp, "centred_softmax teacher_temp");
  if (!center.defined() || center.dim() != 2 || center.size(0) != 1 ||
      center.size(1) != teacher_logits.size(1))
    throw std::invalid_argument("centred_softmax center must be [1, " +
                                std::to_string(teacher_logits.size(1)) + "], got " +
                                shape_of(center));
  torch::NoGradGuard no_grad;
  return torch::softmax((teacher_logits.detach().to(torch::kFloat) - center) / teacher_temp, -1);
}

void update_center(at::Tensor& center, const at::Tensor& teacher_logits, double momentum,
                   const AllReduceSum& all_reduce_sum) {
  expect_shape(teacher_logits, "update_center teacher_logits", 2, "[B, K]");
  torch::NoGradGuard no_grad;
  // The rows' sum and their count in one tensor: one all-reduce gives the global mean.
  at::Tensor sum_and_count =
      torch::cat({teacher_logits.detach().to(torch::kFloat).sum(0),
                  torch::full({1}, static_cast<double>(teacher_logits.size(0)),
                              center.options().dtype(torch::kFloat))});
  if (all_reduce_sum) all_reduce_sum(sum_and_count);
  const int64_t k = teacher_logits.size(1);
  const at::Tensor batch_center = (sum_and_count.narrow(0, 0, k) / sum_and_count[k]).view({1, k});
  center.mul_(momentum).add_(batch_center, 1.0 - momentum);
}

at::Tensor teacher_targets(const at::Tensor& teacher_global, const at::Tensor& teacher_final_step,
                           const ObjectiveOptions& options) {
  expect_shape(teacher_global, "teacher_global", 2, "[B, K]");
  if (!teacher_final_step.defined() || teacher_final_step.sizes() != teacher_global.sizes())
    throw std::invalid_argument("teacher_final_step must have teacher_global's shape " +
                                shape_of(teacher_global) + ", got " + shape_of(teacher_final_step));
  const int64_t batch = teacher_global.size(0);
  const at::Tensor both = torch::cat({teacher_global.detach(), teacher_final_step.detach()}, 0);
  const at::Tensor targets = options.center.defined()
                                 ? centred_softmax(both, options.center, options.teacher_temp)
                                 : sinkhorn_knopp(both, options.teacher_temp, options.sinkhorn);
  return targets.view({2, batch, teacher_global.size(1)});
}

LossParts sequential_to_global_loss(const at::Tensor& targets, const StudentOutputs& student,
                                    const ObjectiveOptions& options) {
  expect_shape(targets, "targets", 3, "[2, B, K]");
  const int64_t batch = targets.size(1), prototypes = targets.size(2);
  if (targets.size(0) != 2)
    throw std::invalid_argument("targets must be [2, B, K], got " + shape_of(targets));
  expect_positive(options.student_temp, "student_temp");
  const std::string bk = std::to_string(batch) + ", " + std::to_string(prototypes) + "]";
  auto check_views = [&](const at::Tensor& t, const std::string& name, int64_t dim) {
    const std::string expected = (dim == 2 ? std::string("[") : std::string("[n >= 1, ")) + bk;
    expect_shape(t, name, dim, expected);
    if (t.size(-2) != batch || t.size(-1) != prototypes || (dim == 3 && t.size(0) < 1))
      throw std::invalid_argument(name + " must be " + expected + ", got " + shape_of(t));
  };
  check_views(student.global, "student.global", 2);
  check_views(student.local, "student.local", 3);
  check_views(student.sequential, "student.sequential", 3);

  // Mean over the two targets of CE = CE against their mean (CE is linear in the target).
  const at::Tensor both = targets.detach().to(torch::kFloat).mean(0);  // [B, K]
  const at::Tensor global_target = targets.detach().to(torch::kFloat)[0];
  auto cross_entropy = [&](const at::Tensor& logits,
                           const at::Tensor& target) {  // [n, B, K] -> [n]
    const at::Tensor lsm = torch::log_softmax(logits.to(torch::kFloat) / options.student_temp, -1);
    return -(target * lsm).sum(-1).mean(-1);
  };
  LossParts parts;
  const at::Tensor global = cross_entropy(student.global.unsqueeze(0), both).squeeze(0);
  const at::Tensor local = cross_entropy(student.local, both).mean();
  const at::Tensor per_step =
      cross_entropy(student.sequential, options.sequential_targets_global ? global_target : both);
  const at::Tensor sequential = per_step.mean();
  const at::Tensor static_loss = options.global_weight * global + options.local_weight * local;
  const at::Tensor dino =
      (1.0 - options.sequential_weight) * static_loss + options.sequential_weight * sequential;
  at::Tensor koleo = torch::zeros({}, dino.options());
  if (options.koleo_weight != 0) {
    if (!student.global_token.defined() || student.global_token.dim() != 2 ||
        student.global_token.size(0) != batch)
      throw std::invalid_argument("student.global_token must be [" + std::to_string(batch) +
                                  ", D] when koleo_weight != 0, got " +
                                  shape_of(student.global_token));
    koleo = koleo_loss(student.global_token);
  }
  parts.loss = dino + options.koleo_weight * koleo;
  parts.dino = dino.detach();
  parts.static_loss = static_loss.detach();
  parts.global = global.detach();
  parts.local = local.detach();
  parts.sequential = sequential.detach();
  parts.per_step = per_step.detach();
  parts.koleo = koleo.detach();
  return parts;
}

TargetStats target_stats(const at::Tensor& targets) {
  if (!targets.defined() || targets.dim() < 1 || targets.numel() == 0)
    throw std::invalid_argument("target_stats targets must be non-empty [..., K], got " +
                                shape_of(targets));
  torch::NoGradGuard no_grad;
  const at::Tensor rows = targets.detach().to(torch::kFloat).reshape({-1, targets.size(-1)});
  TargetStats stats;
  stats.mean_entropy = (-(rows * torch::log(rows.clamp_min(1e-30))).sum(-1)).mean();
  // A mark per prototype that is some row's argmax (bincount would read its input's
  // maximum back to the host).
  const at::Tensor marks = torch::zeros({rows.size(1)}, rows.options().dtype(torch::kLong));
  stats.prototypes_used = marks.scatter_(0, rows.argmax(1), 1).sum();
  return stats;
}

}  // namespace saccade::ssl
