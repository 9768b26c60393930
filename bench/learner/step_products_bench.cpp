#include "bench/learner/step_products_bench.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <tuple>

#include "common/seconds_since.h"

namespace saccade::bench {
namespace {

struct Timing {  // seconds per call
  double forward = 0, input_grad = 0, weight_grad = 0;
};

double seconds_per_call(const torch::Device& device, int reps, const std::function<void()>& f) {
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  for (int i = 0; i < 2; ++i) f();
  sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  sync();
  return seconds_since(start) / reps;
}

Timing time_product(const ssl::StepProduct& p, const torch::Device& device, torch::ScalarType dtype,
                    int reps) {
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

}  // namespace

nlohmann::ordered_json time_step_products(const std::vector<ssl::StepProduct>& products,
                                          const torch::Device& device, torch::ScalarType dtype,
                                          int reps, double model_flop_per_step, double peak_tflops,
                                          std::ostream& out) {
  torch::NoGradGuard no_grad;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Timing> timed;  // by shape
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  double seconds = 0, flops = 0;
  out << fmt::format("{:<28} {:<10} {:>22} {:>6} {:>9} {:>8} {:>8} {:>8}\n", "pass", "layer",
                     "[m, k] x [k, n]", "calls", "ms/step", "fwd TF/s", "dx TF/s", "dW TF/s");
  for (const ssl::StepProduct& p : products) {
    const auto key = std::make_tuple(p.m, p.k, p.n, p.backward);
    if (!timed.count(key)) timed[key] = time_product(p, device, dtype, reps);
    const Timing& t = timed[key];
    const double call_flops = 2.0 * static_cast<double>(p.m) * p.k * p.n;
    const double per_step = p.calls * (t.forward + t.input_grad + t.weight_grad);
    seconds += per_step;
    flops += static_cast<double>(p.flops());
    const auto rate = [&](double s) { return s > 0 ? call_flops / s / 1e12 : 0.0; };
    out << fmt::format("{:<28} {:<10} {:>22} {:>6} {:>9.3f} {:>8.1f} {:>8} {:>8}\n", p.pass,
                       p.layer, fmt::format("[{}, {}] x [{}, {}]", p.m, p.k, p.k, p.n), p.calls,
                       1e3 * per_step, rate(t.forward),
                       p.backward ? fmt::format("{:.1f}", rate(t.input_grad)) : "-",
                       p.backward ? fmt::format("{:.1f}", rate(t.weight_grad)) : "-");
    rows.push_back({{"pass", p.pass},
                    {"layer", p.layer},
                    {"m", p.m},
                    {"k", p.k},
                    {"n", p.n},
                    {"calls", p.calls},
                    {"backward", p.backward},
                    {"model_flops", p.model_flops},
                    {"ms_per_step", 1e3 * per_step},
                    {"forward_tflops", rate(t.forward)},
                    {"input_grad_tflops", p.backward ? rate(t.input_grad) : 0.0},
                    {"weight_grad_tflops", p.backward ? rate(t.weight_grad) : 0.0}});
  }
  const double tflops = seconds > 0 ? flops / seconds / 1e12 : 0;
  const bool peak = peak_tflops > 0;
  const double bound = peak && seconds > 0 ? model_flop_per_step / seconds / 1e12 / peak_tflops : 0;
  out << fmt::format(
      "the products alone: {:.2f} ms per step for {:.1f} GFLOP, {:.1f} TFLOP/s{}{}\n",
      1e3 * seconds, flops / 1e9, tflops,
      peak ? fmt::format(" ({:.1f}% of peak)", 100 * tflops / peak_tflops) : "",
      peak ? fmt::format("; the step's MFU cannot pass {:.1f}% while they run at this rate (its "
                         "model FLOPs over their time alone)",
                         100 * bound)
           : "");
  nlohmann::ordered_json j = {{"ms_per_step", 1e3 * seconds},
                              {"flop_per_step", flops},
                              {"model_flop_per_step", model_flop_per_step},
                              {"tflops", tflops},
                              {"reps", reps},
                              {"rows", rows}};
  j["peak_share"] = peak ? nlohmann::ordered_json(tflops / peak_tflops) : nullptr;
  j["mfu_bound"] = peak ? nlohmann::ordered_json(bound) : nullptr;
  return j;
}

}  // namespace saccade::bench
