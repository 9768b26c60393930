#include "bench/model/model_bench.h"

#include <malloc.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <stdexcept>
#include <utility>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench/median.h"
#include "common/device_peak.h"
#include "model/backbone.h"
#include "model/flops.h"

namespace saccade::model {
namespace {

using bench::median;

// Peak resident memory (VmHWM) of this process in KiB, from /proc/self/status.
int64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      int64_t kib = 0;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}
int64_t current_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}
// Writing "5" to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

struct Row {
  std::string preset, mode;
  int64_t image_side = 0, patch_tokens = 0, tokens = 0, batch = 0;
  double fwd_ms = 0, fwd_bwd_ms = 0, fwd_bwd_min_ms = 0, peak_mib = 0, gflop_fwd_bwd = 0;
};

BackboneOptions preset(const std::string& name) {
  if (name == "tiny") return BackboneOptions::tiny();
  if (name == "vit_s") return BackboneOptions::vit_s();
  throw std::invalid_argument("presets: unknown preset \"" + name + "\" (expected tiny or vit_s)");
}

// Gaze positions drawn in pixels of a side x side image, then expressed in
// short-side units as the data pipeline does; zooms in [0, 5].
torch::Tensor positions_for(int64_t batch, int64_t tokens, int64_t side) {
  auto px = torch::rand({batch, tokens, 2}) * static_cast<double>(side);
  auto z = torch::rand({batch, tokens, 1}) * 5.0;
  return torch::cat({px / static_cast<double>(side), z}, -1);
}

struct Case {
  Row row;
  torch::Tensor patches, positions, state;
  std::vector<double> fwd, fwd_bwd;
};

// One training step's forward and backward, in milliseconds.
std::pair<double, double> run_once(FovealBackbone& model, const Case& c) {
  using clock = std::chrono::steady_clock;
  const bool cuda = c.patches.is_cuda();  // kernels are asynchronous: wait before reading clocks
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  const auto t0 = clock::now();
  auto out = model->step(c.patches, c.positions, c.state);
  auto loss = out.state.square().mean() + out.patch_tokens.square().mean();
  if (cuda) torch::cuda::synchronize();
  const auto t1 = clock::now();
  loss.backward();
  if (cuda) torch::cuda::synchronize();
  const auto t2 = clock::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(),
          std::chrono::duration<double, std::milli>(t2 - t0).count()};
}

// The rows of one preset. Timed iterations alternate between the rows, so
// load from other processes drifts into all of them alike (the 256^2 vs
// 4096^2 comparison must not depend on when each row ran).
std::vector<Row> measure_preset(FovealBackbone& model, const std::string& name,
                                const ModelBenchOptions& o, const torch::TensorOptions& to) {
  const auto& mo = model->options();
  std::vector<Case> cases;
  auto add = [&](const std::string& mode, int64_t side, int64_t patch_tokens) {
    Case c;
    c.row.preset = name;
    c.row.mode = mode;
    c.row.image_side = side;
    c.row.patch_tokens = patch_tokens;
    c.row.tokens = patch_tokens + mo.n_state;
    c.row.batch = o.batch;
    c.row.gflop_fwd_bwd = static_cast<double>(step_flops(mo, patch_tokens).forward_backward()) *
                          static_cast<double>(o.batch) / 1e9;
    c.patches =
        torch::randn({o.batch, patch_tokens, mo.channels, mo.patch_size, mo.patch_size}).to(to);
    c.positions = positions_for(o.batch, patch_tokens, side).to(to);
    c.state = model->initial_state(o.batch).normal_();  // a mid-sequence state
    cases.push_back(std::move(c));
  };
  add("foveal", 256, o.foveal_tokens);
  add("foveal", 4096, o.foveal_tokens);
  if (o.vit_mode) add("vit", 256, 256);
  run_once(model, cases[0]);  // one-time costs (BLAS buffers, thread pool)
  for (auto& c : cases) {     // warm-up step of each row, which also gives its peak memory
    malloc_trim(0);           // hand freed heap back so VmRSS is the live baseline
    const int64_t rss_before = current_rss_kib();
    reset_peak_rss();
    run_once(model, c);
    // Host memory only: on a GPU the figure is the host side of the step.
    c.row.peak_mib = static_cast<double>(peak_rss_kib() - rss_before) / 1024.0;
  }
  for (int i = 0; i < o.iters; ++i)
    for (auto& c : cases) {
      const auto [fwd, fwd_bwd] = run_once(model, c);
      c.fwd.push_back(fwd);
      c.fwd_bwd.push_back(fwd_bwd);
    }
  std::vector<Row> rows;
  for (auto& c : cases) {
    c.row.fwd_ms = median(c.fwd);
    c.row.fwd_bwd_ms = median(c.fwd_bwd);
    c.row.fwd_bwd_min_ms = *std::min_element(c.fwd_bwd.begin(), c.fwd_bwd.end());
    rows.push_back(c.row);
  }
  return rows;
}

void write_json(const std::string& path, const ModelBenchOptions& o, const std::vector<Row>& rows) {
  nlohmann::json out = {{"bench", "model"},       {"threads", o.threads},
                        {"batch", o.batch},       {"iters", o.iters},
                        {"device", o.device},     {"bf16", o.bf16},
                        {"torch", TORCH_VERSION}, {"rows", nlohmann::json::array()}};
  // MFU against the device's dense peak in this precision (common/device_peak.h; null when
  // the device is not in its table, a CPU among them).
  const double peak = resolve_peak_tflops(0, o.device, o.bf16 ? "bf16" : "fp32");
  for (const auto& r : rows) {
    const double gflops_per_s = r.gflop_fwd_bwd / (r.fwd_bwd_ms / 1e3);
    out["rows"].push_back(
        {{"preset", r.preset},
         {"mode", r.mode},
         {"image_side", r.image_side},
         {"patch_tokens", r.patch_tokens},
         {"tokens", r.tokens},
         {"batch", r.batch},
         {"fwd_ms", r.fwd_ms},
         {"fwd_bwd_ms", r.fwd_bwd_ms},
         {"fwd_bwd_min_ms", r.fwd_bwd_min_ms},
         {"peak_rss_delta_mib", r.peak_mib},
         {"gflop_fwd_bwd", r.gflop_fwd_bwd},
         {"gflops_per_s", gflops_per_s},
         {"images_per_s", static_cast<double>(r.batch) / (r.fwd_bwd_ms / 1e3)},
         {"mfu", peak > 0 ? nlohmann::json(gflops_per_s / 1e3 / peak) : nlohmann::json(nullptr)}});
  }
  std::ofstream f(path);
  if (!f) throw std::runtime_error("json_path: cannot write \"" + path + "\"");
  f << out.dump(2) << "\n";
}

}  // namespace

int run_model_bench(const ModelBenchOptions& o, std::ostream& out) {
  if (o.threads <= 0) throw std::invalid_argument("threads: expected > 0");
  if (o.batch <= 0) throw std::invalid_argument("batch: expected > 0");
  if (o.iters <= 0) throw std::invalid_argument("iters: expected > 0");
  if (o.foveal_tokens <= 0) throw std::invalid_argument("foveal_tokens: expected > 0");
  at::set_num_threads(o.threads);
  c10::optional<torch::Device> device;
  try {
    device = torch::Device(o.device);
  } catch (const std::exception&) {
    throw std::invalid_argument("device: expected cpu or cuda[:i], got \"" + o.device + "\"");
  }
  if (device->is_cuda() && !torch::cuda::is_available())
    throw std::invalid_argument("device: " + o.device + " requested but this LibTorch has no CUDA");
  const auto to =
      torch::TensorOptions().device(*device).dtype(o.bf16 ? torch::kBFloat16 : torch::kFloat);
  torch::manual_seed(0);
  out << "model bench: LibTorch " << TORCH_VERSION << ", " << o.device
      << (o.bf16 ? " bf16, " : " fp32, ") << at::get_num_threads() << " threads, batch " << o.batch
      << ", median and min of " << o.iters
      << " interleaved iterations; peak = VmHWM - VmRSS before the row (VmHWM reset via "
         "/proc/self/clear_refs, "
         "heap trimmed first)\n";
  // libgomp reads OMP_WAIT_POLICY at load time: with its default (spinning workers)
  // the OpenMP threads fight OpenBLAS's own threads on a small machine, 4-5x slower here.
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  out << "OMP_WAIT_POLICY=" << (wait_policy ? wait_policy : "(unset)")
      << (wait_policy && std::string(wait_policy) == "passive"
              ? "\n"
              : "  (set OMP_WAIT_POLICY=passive before starting: spinning OpenMP workers slow "
                "BLAS threads)\n");
  std::vector<Row> rows;
  for (const auto& name : o.presets) {
    FovealBackbone model(preset(name));
    model->to(*device, o.bf16 ? torch::kBFloat16 : torch::kFloat);
    model->train();
    for (auto& r : measure_preset(model, name, o, to)) rows.push_back(r);
  }
  out << std::left << std::setw(7) << "preset" << std::setw(8) << "mode" << std::right
      << std::setw(7) << "image" << std::setw(8) << "tokens" << std::setw(11) << "fwd ms"
      << std::setw(13) << "fwd+bwd ms" << std::setw(9) << "min ms" << std::setw(11) << "peak MiB"
      << std::setw(13) << "GFLOP f+b" << std::setw(10) << "GFLOP/s"
      << "\n";
  out << std::fixed;
  for (const auto& r : rows) {
    out << std::left << std::setw(7) << r.preset << std::setw(8) << r.mode << std::right
        << std::setw(7) << r.image_side << std::setw(8) << r.tokens << std::setw(11)
        << std::setprecision(1) << r.fwd_ms << std::setw(13) << r.fwd_bwd_ms << std::setw(9)
        << r.fwd_bwd_min_ms << std::setw(11) << r.peak_mib << std::setw(13) << std::setprecision(2)
        << r.gflop_fwd_bwd << std::setw(10) << std::setprecision(1)
        << r.gflop_fwd_bwd / (r.fwd_bwd_ms / 1e3) << "\n";
  }
  for (size_t i = 0; i + 1 < rows.size(); ++i)
    if (rows[i].mode == "foveal" && rows[i + 1].mode == "foveal" &&
        rows[i].preset == rows[i + 1].preset)
      out << rows[i].preset << ": foveal step time " << rows[i + 1].image_side << "^2 / "
          << rows[i].image_side << "^2 = " << std::setprecision(3)
          << rows[i + 1].fwd_bwd_ms / rows[i].fwd_bwd_ms << " (median), "
          << rows[i + 1].fwd_bwd_min_ms / rows[i].fwd_bwd_min_ms << " (min)\n";
  for (const auto& name : o.presets) {
    const auto mo = preset(name);
    const auto vit = step_flops(mo, 256), fov = step_flops(mo, o.foveal_tokens);
    out << name << ": analytic forward GFLOP per sample: ViT mode " << std::setprecision(3)
        << vit.forward() / 1e9 << " (" << vit.tokens << " tokens), foveal step "
        << fov.forward() / 1e9 << " (" << fov.tokens << " tokens), ratio " << std::setprecision(2)
        << static_cast<double>(vit.forward()) / static_cast<double>(fov.forward()) << "\n";
  }
  if (!o.json_path.empty()) write_json(o.json_path, o, rows);
  return 0;
}

}  // namespace saccade::model
