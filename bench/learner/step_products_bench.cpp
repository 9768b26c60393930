#include "bench/learner/step_products_bench.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <tuple>

#include "bench/learner/device.h"
#include "common/seconds_since.h"
#include "model/torch_compat.h"

namespace saccade::bench {
namespace {

struct Timing {  // seconds per call
  double forward = 0, input_grad = 0, weight_grad = 0;
};

double seconds_per_call(const torch::Device& device, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 2; ++i) f();
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  synchronize(device);
  return seconds_since(start) / reps;
}

Timing time_product(const ssl::StepProduct& p, const torch::Device& device, torch::ScalarType dtype,
                    int reps) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const torch::Tensor x = torch::randn({p.m, p.k}, options);
  const torch::Tensor w = torch::randn({p.n, p.k}, options) / std::sqrt(double(p.k));
  const torch::Tensor bias = torch::zeros({p.n}, options);
  Timing t;
  t.forward = seconds_per_call(device, reps, [&] { (void)torch::linear(x, w, bias); });
  if (!p.backward) return t;
  const torch::Tensor dy = torch::randn({p.m, p.n}, options);
  t.input_grad = seconds_per_call(device, reps, [&] { (void)torch::mm(dy, w); });
  t.weight_grad = seconds_per_call(device, reps, [&] { (void)torch::mm(dy.t(), x); });
  return t;
}

// Attention of one pass as the blocks run it (model::attention); input_grad: its backward.
Timing time_attention(const ssl::StepPass& p, int64_t heads, int64_t width,
                      const torch::Device& device, torch::ScalarType dtype, int reps) {
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const std::vector<int64_t> shape = {p.sequences, heads, p.tokens, width / heads};
  Timing t;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor q = torch::randn(shape, options), k = torch::randn(shape, options),
                        v = torch::randn(shape, options);
    t.forward = seconds_per_call(device, reps, [&] { (void)model::attention(q, k, v); });
  }
  if (!p.backward) return t;
  const torch::Tensor q = torch::randn(shape, options).requires_grad_(),
                      k = torch::randn(shape, options).requires_grad_(),
                      v = torch::randn(shape, options).requires_grad_();
  const torch::Tensor grad = torch::randn(shape, options);
  const double both = seconds_per_call(
      device, reps, [&] { torch::autograd::backward({model::attention(q, k, v)}, {grad}); });
  t.input_grad = std::max(0.0, both - t.forward);
  return t;
}

std::string rate_text(double tflops) {
  return tflops > 0 ? fmt::format("{:.1f}", tflops) : "-";
}

// The kinds of work the products and attention are totalled by, which say which kind falls
// short of the peak; their JSON names in this order.
enum Kind { kForward, kInputGrad, kWeightGrad, kAttentionForward, kAttentionBackward, kKinds };
constexpr const char* kKindNames[kKinds] = {"forward", "input_grad", "weight_grad",
                                            "attention_forward", "attention_backward"};

struct KindTotal {  // seconds and FLOPs a step spends in one kind of work
  double seconds = 0, flops = 0;
  void add(double s, double f) { seconds += s, flops += f; }
  double tflops() const { return seconds > 0 ? flops / seconds / 1e12 : 0; }
};

}  // namespace

nlohmann::ordered_json time_step_shapes(const StepShapes& shapes, const torch::Device& device,
                                        torch::ScalarType dtype, int reps,
                                        double model_flop_per_step, double peak_tflops,
                                        std::ostream& out) {
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Timing> timed;  // by shape
  nlohmann::ordered_json products = nlohmann::ordered_json::array(),
                         attention = nlohmann::ordered_json::array();
  double product_seconds = 0, attention_seconds = 0, flops = 0;
  KindTotal kinds[kKinds];
  out << fmt::format("{:<32} {:<10} {:>28} {:>6} {:>9} {:>8} {:>8} {:>8}\n", "pass", "layer",
                     "shape", "calls", "ms/step", "fwd TF/s", "dx TF/s", "dW TF/s");
  for (const ssl::StepProduct& p : shapes.products) {
    const auto key = std::make_tuple(p.m, p.k, p.n, p.backward);
    if (!timed.count(key)) timed[key] = time_product(p, device, dtype, reps);
    const Timing& t = timed[key];
    const double call_flops = 2.0 * static_cast<double>(p.m) * p.k * p.n;
    const double per_step = p.calls * (t.forward + t.input_grad + t.weight_grad);
    product_seconds += per_step;
    flops += static_cast<double>(p.flops());
    kinds[kForward].add(p.calls * t.forward, p.calls * call_flops);
    if (p.backward) {
      kinds[kInputGrad].add(p.calls * t.input_grad, p.calls * call_flops);
      kinds[kWeightGrad].add(p.calls * t.weight_grad, p.calls * call_flops);
    }
    const auto rate = [&](double s) { return s > 0 ? call_flops / s / 1e12 : 0.0; };
    out << fmt::format("{:<32} {:<10} {:>28} {:>6} {:>9.3f} {:>8} {:>8} {:>8}\n", p.pass, p.layer,
                       fmt::format("[{}, {}] x [{}, {}]", p.m, p.k, p.k, p.n), p.calls,
                       1e3 * per_step, rate_text(rate(t.forward)), rate_text(rate(t.input_grad)),
                       rate_text(rate(t.weight_grad)));
    products.push_back({{"pass", p.pass},
                        {"layer", p.layer},
                        {"m", p.m},
                        {"k", p.k},
                        {"n", p.n},
                        {"calls", p.calls},
                        {"backward", p.backward},
                        {"model_flops", p.model_flops},
                        {"ms_per_step", 1e3 * per_step},
                        {"forward_tflops", rate(t.forward)},
                        {"input_grad_tflops", rate(t.input_grad)},
                        {"weight_grad_tflops", rate(t.weight_grad)}});
  }
  timed.clear();
  for (const ssl::StepPass& p : shapes.passes) {
    const auto key = std::make_tuple(p.sequences, p.tokens, int64_t{0}, p.backward);
    if (!timed.count(key))
      timed[key] = time_attention(p, shapes.heads, shapes.width, device, dtype, reps);
    const Timing& t = timed[key];
    // QK^T and AV: 2 x 2 n^2 d per sequence (the backward: twice that).
    const double call_flops =
        4.0 * static_cast<double>(p.sequences) * p.tokens * p.tokens * shapes.width;
    const int64_t calls = p.calls * shapes.depth;
    const double per_step = calls * (t.forward + t.input_grad);
    attention_seconds += per_step;
    flops += call_flops * calls * (p.backward ? 3 : 1);
    kinds[kAttentionForward].add(calls * t.forward, calls * call_flops);
    if (p.backward) kinds[kAttentionBackward].add(calls * t.input_grad, 2 * calls * call_flops);
    const double forward = t.forward > 0 ? call_flops / t.forward / 1e12 : 0,
                 backward = t.input_grad > 0 ? 2 * call_flops / t.input_grad / 1e12 : 0;
    out << fmt::format("{:<32} {:<10} {:>28} {:>6} {:>9.3f} {:>8} {:>8} {:>8}\n", p.name,
                       "attention",
                       fmt::format("{} x {} x {} x {}", p.sequences, shapes.heads, p.tokens,
                                   shapes.width / shapes.heads),
                       calls, 1e3 * per_step, rate_text(forward), rate_text(backward), "-");
    attention.push_back({{"pass", p.name},
                         {"sequences", p.sequences},
                         {"heads", shapes.heads},
                         {"tokens", p.tokens},
                         {"head_dim", shapes.width / shapes.heads},
                         {"calls", calls},
                         {"backward", p.backward},
                         {"model_flops", p.model_flops},
                         {"ms_per_step", 1e3 * per_step},
                         {"forward_tflops", forward},
                         {"backward_tflops", backward}});
  }
  const double seconds = product_seconds + attention_seconds;
  const double tflops = seconds > 0 ? flops / seconds / 1e12 : 0;
  const bool peak = peak_tflops > 0;
  const double bound = peak && seconds > 0 ? model_flop_per_step / seconds / 1e12 / peak_tflops : 0;
  out << fmt::format(
      "products {:.2f} ms + attention {:.2f} ms per step, alone: {:.1f} GFLOP at {:.1f} "
      "TFLOP/s{}{}\n",
      1e3 * product_seconds, 1e3 * attention_seconds, flops / 1e9, tflops,
      peak ? fmt::format(" ({:.1f}% of peak)", 100 * tflops / peak_tflops) : "",
      peak ? fmt::format("; the step's MFU cannot pass {:.1f}% while they run at this rate (its "
                         "model FLOPs over their time alone)",
                         100 * bound)
           : "");
  out << "by kind:";
  nlohmann::ordered_json by_kind = nlohmann::ordered_json::object();
  for (int i = 0; i < kKinds; ++i) {
    out << fmt::format("{} {} {:.2f} ms at {} TFLOP/s", i ? ";" : "", kKindNames[i],
                       1e3 * kinds[i].seconds, rate_text(kinds[i].tflops()));
    by_kind[kKindNames[i]] = {{"ms_per_step", 1e3 * kinds[i].seconds},
                              {"flop_per_step", kinds[i].flops},
                              {"tflops", kinds[i].tflops()}};
  }
  out << "\n";
  nlohmann::ordered_json j = {{"ms_per_step", 1e3 * seconds},
                              {"products_ms_per_step", 1e3 * product_seconds},
                              {"attention_ms_per_step", 1e3 * attention_seconds},
                              {"flop_per_step", flops},
                              {"model_flop_per_step", model_flop_per_step},
                              {"tflops", tflops},
                              {"reps", reps}};
  j["peak_share"] = peak ? nlohmann::ordered_json(tflops / peak_tflops) : nullptr;
  j["mfu_bound"] = peak ? nlohmann::ordered_json(bound) : nullptr;
  j["by_kind"] = by_kind;
  j["products"] = products;
  j["attention"] = attention;
  return j;
}

}  // namespace saccade::bench
