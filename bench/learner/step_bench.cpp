#include "bench/learner/step_bench.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <ostream>
#include <set>
#include <stdexcept>
#include <thread>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#include "bench/learner/device.h"
#include "bench/learner/step_products_bench.h"
#include "common/config.h"
#include "common/device_peak.h"
#include "common/file_bytes.h"
#include "common/seconds_since.h"
#include "dataloader/views.h"
#include "model/backbone.h"
#include "model/heads.h"
#include "model/layers.h"
#include "model/torch_compat.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/ssl/step_flops.h"

namespace saccade::bench {
namespace {

struct Variant {
  std::string name;
  std::string precision = "fp32";  // ssl.precision: fp32 | bf16 | bf16-params
  bool fused_attention = true;
  bool multi_tensor = true;
  bool folded_layerscale = true;
  bool fused_add_norm = false;    // ssl.fused_add_norm
  bool tanh_gelu = false;         // model.gelu = "tanh"
  bool fused_mlp = false;         // ssl.fused_mlp (needs tanh_gelu)
  bool fused_bias_grad = false;   // ssl.fused_bias_grad
  bool phase_syncs = false;       // the timed steps also synchronise after every phase
  bool learner_cuts = false;      // batches carry images and boxes: the trainer cuts (views.cut_on)
  bool batched_glimpses = false;  // ssl.batched_glimpses
  bool cuda_graphs = false;       // ssl.cuda_graphs
  bool prefetch = false;          // ssl.prefetch_to_device: each step stages the next batch
};

// "bf16+sdpa+foreach" -> levers; tokens not named are off (fp32 unless a bf16 mode is named).
Variant parse_variant(const std::string& text, const JobConfig& config) {
  Variant v;
  v.name = text;
  if (text == "config") {
    v.precision = config.ssl.precision;
    v.learner_cuts = config.views.cut_on == "learner";
    v.batched_glimpses = config.ssl.batched_glimpses;
    v.cuda_graphs = config.ssl.cuda_graphs;
    v.prefetch = config.ssl.prefetch_to_device;
    v.fused_add_norm = config.ssl.fused_add_norm;
    v.tanh_gelu = config.model.gelu == "tanh";
    v.fused_mlp = config.ssl.fused_mlp;
    v.fused_bias_grad = config.ssl.fused_bias_grad;
    return v;
  }
  v.fused_attention = v.multi_tensor = v.folded_layerscale = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('+', start), text.size());
    const std::string lever = text.substr(start, end - start);
    if (lever == "fp32" || lever == "bf16" || lever == "bf16-params") {
      v.precision = lever;
    } else if (lever == "sdpa") {
      v.fused_attention = true;
    } else if (lever == "foreach") {
      v.multi_tensor = true;
    } else if (lever == "fold") {
      v.folded_layerscale = true;
    } else if (lever == "addnorm") {
      v.fused_add_norm = true;
    } else if (lever == "tanh") {
      v.tanh_gelu = true;
    } else if (lever == "mlp") {
      v.tanh_gelu = v.fused_mlp = true;
    } else if (lever == "bgrad") {
      v.fused_bias_grad = true;
    } else if (lever == "sync") {
      v.phase_syncs = true;
    } else if (lever == "cut") {
      v.learner_cuts = true;
    } else if (lever == "batched") {
      v.batched_glimpses = true;
    } else if (lever == "graphs") {
      v.cuda_graphs = true;
    } else if (lever == "prefetch") {
      v.prefetch = true;
    } else {
      throw std::invalid_argument(fmt::format(
          "--variants: unknown lever \"{}\" in \"{}\" (expected fp32, bf16, bf16-params, sdpa, "
          "foreach, fold, addnorm, tanh, mlp, bgrad, sync, cut, batched, graphs, prefetch joined "
          "by '+', "
          "or config)",
          lever, text));
    }
    start = end + 1;
  }
  return v;
}

// The config with variant `v`'s levers that are config keys (the rest, fused attention,
// multi-tensor updates and the LayerScale fold, are always on in training).
JobConfig with_variant(JobConfig c, const Variant& v) {
  c.ssl.precision = v.precision;
  c.model.gelu = v.tanh_gelu ? "tanh" : "erf";
  c.ssl.fused_add_norm = v.fused_add_norm;
  c.ssl.fused_mlp = v.fused_mlp;
  c.ssl.fused_bias_grad = v.fused_bias_grad;
  c.ssl.batched_glimpses = v.batched_glimpses;
  c.ssl.cuda_graphs = v.cuda_graphs;
  c.ssl.prefetch_to_device = v.prefetch;
  c.views.cut_on = v.learner_cuts ? "learner" : "data";
  return c;
}

// SECTION.KEY=VALUE pairs (scripts/config_variant.sh) that make a job train as variant `v`
// does; none when the variant turns off a lever training always uses.
std::vector<std::string> config_keys(const JobConfig& config, const Variant& v) {
  if (!v.fused_attention || !v.multi_tensor || !v.folded_layerscale) return {};
  const JobConfig c = with_variant(config, v);
  const auto flag = [](const char* key, bool on) {
    return std::string(key) + (on ? "=true" : "=false");
  };
  return {"ssl.precision=" + c.ssl.precision,
          "model.gelu=" + c.model.gelu,
          flag("ssl.fused_add_norm", c.ssl.fused_add_norm),
          flag("ssl.fused_mlp", c.ssl.fused_mlp),
          flag("ssl.fused_bias_grad", c.ssl.fused_bias_grad),
          flag("ssl.batched_glimpses", c.ssl.batched_glimpses),
          flag("ssl.cuda_graphs", c.ssl.cuda_graphs),
          flag("ssl.prefetch_to_device", c.ssl.prefetch_to_device),
          "views.cut_on=" + c.views.cut_on};
}

// Batches of noise images of width x height cut with the config's views (real geometry,
// real augmentation draws), by the data plane or, with learner_cuts, left for the trainer
// to cut: the same views either way, so both give the same losses.
std::vector<data::SslBatch> synthetic_batches(const JobConfig& config, int64_t batch, int count,
                                              bool learner_cuts, int width, int height) {
  data::ViewOptions views = job_options::view_options(config);
  views.cut_on_learner = learner_cuts;
  std::vector<data::SslBatch> out(static_cast<size_t>(count));
  cv::RNG rng(static_cast<uint64_t>(config.job.seed) + 1);
  int64_t seed = 0;
  for (data::SslBatch& b : out) {
    b.allocate(views, batch);
    for (int64_t i = 0; i < batch; ++i) {
      cv::Mat image(height, width, CV_8UC(views.channels));
      rng.fill(image, cv::RNG::UNIFORM, 0, 256);
      data::make_ssl_views(views, image, static_cast<uint64_t>(seed), i, b);
      b.indices[static_cast<size_t>(i)] = seed++;
    }
  }
  return out;
}

// What a reimplementation of the step needs to run the same model on the same views
// (scripts/gpu/torch_step.py, the PyTorch reference, reads it): the backbone and head
// options, every student parameter's name and shape, the views' tokens, the objective's
// constants and the device's peaks.
nlohmann::ordered_json step_description(const JobConfig& config, const StepBenchOptions& o,
                                        int64_t steps_per_epoch) {
  const ssl::TrainerOptions t = job_options::trainer_options(config, steps_per_epoch, o.device);
  const data::ViewOptions v = job_options::view_options(config);
  const model::BackboneOptions& b = t.backbone;
  const double configured_peak = o.peak_tflops > 0 ? o.peak_tflops : config.ssl.peak_tflops;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::array();
  const auto add = [&](const std::string& prefix, const torch::nn::Module& module) {
    for (const auto& p : module.named_parameters())
      parameters.push_back({prefix + p.key(), p.value().sizes().vec()});
  };
  add("backbone.", *model::FovealBackbone(b));
  add("head.", *model::DinoHead(t.head));
  const auto peak = [&](const char* precision) {  // null: not known, no MFU
    const double tflops = resolve_peak_tflops(configured_peak, o.device, precision);
    return tflops > 0 ? nlohmann::ordered_json(tflops) : nlohmann::ordered_json(nullptr);
  };
  return {{"backbone",
           {{"patch_size", b.patch_size},
            {"channels", b.channels},
            {"depth", b.depth},
            {"width", b.width},
            {"heads", b.heads},
            {"mlp_hidden", b.mlp_hidden()},
            {"n_state", b.n_state},
            {"pos_mlp_hidden", b.pos_mlp_hidden},
            {"layerscale_init", b.layerscale_init},
            {"norm_eps", b.norm_eps},
            {"state_input", model::state_input_name(b.state_input)},
            {"gelu", model::gelu_name(b.gelu)}}},
          {"head",
           {{"hidden_dim", t.head.hidden_dim},
            {"bottleneck_dim", t.head.bottleneck_dim},
            {"n_prototypes", t.head.n_prototypes},
            {"train_prototype_scale", t.head.train_prototype_scale}}},
          {"views",
           {{"global_tokens", v.global_grid * v.global_grid},
            {"local_tokens", v.local_grid * v.local_grid},
            {"local_views", v.local_views},
            {"glimpse_tokens", v.glimpse_tokens()},
            {"glimpses", v.glimpses}}},
          {"objective",
           {{"student_temp", t.student_temp},
            {"teacher_temp", t.schedule.teacher_temp_start},
            {"sinkhorn_iterations", t.sinkhorn_iterations},
            {"koleo_weight", t.koleo_weight},
            {"global_weight", t.global_weight},
            {"sequential_weight", t.sequential_weight},
            {"clip_grad", t.clip_grad}}},
          {"parameters", parameters},
          {"peak_tflops", {{"bf16", peak("bf16")}, {"fp32", peak("fp32")}}}};
}

struct Row {
  std::string variant;
  int64_t batch = 0;
  double step_ms = 0, images_per_second = 0, tflops = 0, mfu = NAN;
  double peak_gib = NAN;        // device memory the allocator handed out at most; NaN off CUDA
  pretrain::StepPhases phases;  // per step, seconds
  std::vector<double> losses;
  // Against the first variant that ran at this batch (loss_reference; this row's own name
  // when it is that variant). NaN: none, the row failed.
  double max_loss_rel_diff = 0;
  std::string loss_reference;
  std::string failure;  // why the row has no figures (kOutOfMemory, a device error)
  std::vector<std::string> config_keys;  // a job that trains as this variant; empty: none
  static constexpr const char* kOutOfMemory = "out of device memory";
  bool out_of_memory() const { return failure == kOutOfMemory; }  // a figure, not a failure
};

// Runs `work` under the Kineto profiler (CPU ops with their input shapes, and device kernels
// on a GPU) and writes the Chrome trace to `path`.
void profile(const std::string& path, const torch::Device& device,
             const std::function<void()>& work) {
#if TORCH_VERSION_MAJOR >= 2
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  // With the ops' input shapes: what tells an activation-sized kernel from a weight-sized one.
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  // Kineto tearing CUPTI down after a trace of CUDA graphs has crashed processes
  // (docs/references.md, "Kineto"); keep it up unless the environment says otherwise.
  setenv("TEARDOWN_CUPTI", "0", /*overwrite=*/0);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  work();
  synchronize(device);
  profiler::disableProfiler()->save(path);
#else
  (void)device;
  (void)work;
  throw std::invalid_argument("--profile " + path + ": needs LibTorch >= 2 (Kineto), this is " +
                              TORCH_VERSION);
#endif
}

// Trains a fresh trainer of variant `v` on `data`: warm-up, timed steps (into `row`), steps
// timed per phase; then `record()` (the row is complete), and with `profile_it` one more step
// under the profiler.
void measure(const StepBenchOptions& o, const JobConfig& config, const Variant& v,
             int64_t steps_per_epoch, const torch::Device& device,
             const std::vector<data::SslBatch>& data, bool profile_it, Row& row,
             double& flop_per_image, const std::function<void()>& record) {
  JobConfig variant_config = with_variant(config, v);
  if (o.peak_tflops > 0) variant_config.ssl.peak_tflops = o.peak_tflops;
  ssl::TrainerOptions t = job_options::trainer_options(variant_config, steps_per_epoch, o.device);
  t.multi_tensor_update = v.multi_tensor;
  t.time_phases = v.phase_syncs;
  model::set_fused_attention(v.fused_attention);
  model::set_folded_layerscale(v.folded_layerscale);
  reset_peak_device_memory(device);
  pretrain::SslTrainer trainer(t);
  size_t next = 0;
  auto step = [&] {
    const data::SslBatch& batch = data[next++ % data.size()];
    const pretrain::StepStats s =
        trainer.train_step(batch, v.prefetch ? &data[next % data.size()] : nullptr);
    row.losses.push_back(s.loss);
    flop_per_image = s.flop_per_image;
    return s;
  };
  for (int i = 0; i < o.warmup; ++i) step();
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  synchronize(device);
  const double seconds = seconds_since(start);
  row.step_ms = 1e3 * seconds / o.steps;
  row.images_per_second = static_cast<double>(row.batch * o.steps) / seconds;
  row.tflops = flop_per_image * row.images_per_second / 1e12;
  if (t.peak_tflops > 0) row.mfu = row.tflops / t.peak_tflops;
  row.peak_gib = peak_device_memory_gib(device);
  trainer.set_time_phases(true);
  for (int i = 0; i < o.phase_steps; ++i) row.phases += step().phases;
  record();  // before the profiler, which has crashed processes replaying CUDA graphs
  if (!profile_it) return;
  try {
    profile(o.profile_path, device, [&] { step(); });
  } catch (const std::exception& e) {
    // The row's figures stand without the trace; on the CPU a failure is a bug.
    if (!device.is_cuda()) throw;
    fmt::print(stderr, "bench step: --profile {}: no trace: {}\n", o.profile_path, e.what());
  }
}

std::string row_line(const Row& r, double per_phase) {
  if (!r.failure.empty())
    return fmt::format("{:<40} {:>6}  failed: {}\n", r.variant, r.batch, r.failure);
  return fmt::format(
      "{:<40} {:>6} {:>10.1f} {:>9.1f} {:>9.2f} {:>6} {:>7}  {:>8.1f} {:>8.1f} {:>6.1f} "
      "{:>8.1f} {:>7.1f} {:>6.1f}  {:>9.2e}\n",
      r.variant, r.batch, r.images_per_second, r.step_ms, r.tflops,
      std::isfinite(r.mfu) ? fmt::format("{:.1f}%", 100 * r.mfu) : "-",
      std::isfinite(r.peak_gib) ? fmt::format("{:.1f}", r.peak_gib) : "-",
      per_phase * r.phases.teacher, per_phase * r.phases.student, per_phase * r.phases.loss,
      per_phase * r.phases.backward, per_phase * r.phases.update, per_phase * r.phases.other,
      r.max_loss_rel_diff);
}

nlohmann::ordered_json row_json(const Row& r, double per_phase) {
  auto finite_or_null = [](double x) {
    return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
  };
  return {{"variant", r.variant},
          {"batch", r.batch},
          {"images_per_second", r.images_per_second},
          {"step_ms", r.step_ms},
          {"tflops", r.tflops},
          {"mfu", finite_or_null(r.mfu)},
          {"peak_device_memory_gib", finite_or_null(r.peak_gib)},
          {"phases_ms",
           {{"teacher", per_phase * r.phases.teacher},
            {"student", per_phase * r.phases.student},
            {"loss", per_phase * r.phases.loss},
            {"backward", per_phase * r.phases.backward},
            {"update", per_phase * r.phases.update},
            {"other", per_phase * r.phases.other}}},
          {"losses", r.losses},
          {"max_loss_rel_diff", finite_or_null(r.max_loss_rel_diff)},
          {"loss_reference",
           r.loss_reference.empty() ? nullptr : nlohmann::ordered_json(r.loss_reference)},
          {"out_of_memory", r.out_of_memory()},
          {"config_keys", r.config_keys.empty() ? nullptr : nlohmann::ordered_json(r.config_keys)},
          {"failure", r.failure.empty() ? nullptr : nlohmann::ordered_json(r.failure)}};
}

// The JSON file: the measurement's options, and `rows` as measured so far. `running` names
// the variant and batch being measured while one is (null otherwise): a process that ends
// during it leaves that said, and --resume turns it into a failed row.
std::string rows_json(const StepBenchOptions& o, const std::string& device_name,
                      const nlohmann::ordered_json& step, double flop_per_image,
                      const std::vector<nlohmann::ordered_json>& rows,
                      const nlohmann::ordered_json& running,
                      const std::vector<nlohmann::ordered_json>& products) {
  nlohmann::ordered_json j = {{"config", o.config_path},
                              {"device", o.device},
                              {"device_name", device_name},
                              {"torch", TORCH_VERSION},
                              {"flop_per_image", flop_per_image},
                              {"warmup", o.warmup},
                              {"steps", o.steps},
                              {"phase_steps", o.phase_steps},
                              {"step", step},
                              {"running", running},
                              {"rows", rows}};
  if (o.products) j["products"] = products;
  return j.dump(2) + "\n";
}

bool same_row(const nlohmann::ordered_json& row, const std::string& variant, int64_t batch) {
  return row.at("variant") == variant && row.at("batch") == batch;
}

// A row's losses, a null (a NaN written to JSON) read back as NaN.
std::vector<double> row_losses(const nlohmann::ordered_json& row) {
  std::vector<double> losses;
  for (const auto& loss : row.at("losses"))
    losses.push_back(loss.is_number() ? loss.get<double>() : NAN);
  return losses;
}

// --resume: the rows an earlier run of the same measurement left in o.json_path (one the
// device lost or a fault killed), and its FLOPs per image; the variant it was measuring when
// it ended becomes a failed row, so that no rerun measures it again.
std::vector<nlohmann::ordered_json> resumed_rows(const StepBenchOptions& o, double per_phase,
                                                 double& flop_per_image) {
  if (!std::filesystem::exists(o.json_path)) {
    return {};  // the run before ended before its first row: measure every variant
  }
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(read_file_bytes(o.json_path));
    const nlohmann::ordered_json expected = {{"config", o.config_path},
                                             {"device", o.device},
                                             {"warmup", o.warmup},
                                             {"steps", o.steps},
                                             {"phase_steps", o.phase_steps}};
    for (const auto& [key, value] : expected.items()) {
      if (!j.contains(key) || j[key] != value)
        throw std::invalid_argument(fmt::format(
            "--resume: {} was measured with {} = {}, this run has {}: its rows would not "
            "compare (the same options, or another --json)",
            o.json_path, key, j.contains(key) ? j[key].dump() : "nothing", value.dump()));
    }
    std::vector<nlohmann::ordered_json> rows = j.at("rows");
    for (const auto& row : rows) row_losses(row);  // every field the comparisons read is there
    flop_per_image = j.at("flop_per_image").get<double>();
    const nlohmann::ordered_json& running = j.at("running");
    if (!running.is_null()) {
      const std::string variant = running.at("variant");
      const int64_t batch = running.at("batch");
      if (std::none_of(rows.begin(), rows.end(),
                       [&](const auto& r) { return same_row(r, variant, batch); })) {
        Row ended;
        ended.variant = variant;
        ended.batch = batch;
        ended.failure =
            "the process ended while measuring it (a device fault, --variant-timeout, a kill)";
        ended.max_loss_rel_diff = NAN;
        rows.push_back(row_json(ended, per_phase));
      }
    }
    return rows;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(
        fmt::format("--resume: {} is not the JSON of a bench step: {}", o.json_path, e.what()));
  }
}

// The step's matrix products and attention alone (--products) at `batch`, as variant `v`
// runs them.
nlohmann::ordered_json products_alone(const StepBenchOptions& o, const JobConfig& config,
                                      const Variant& v, int64_t batch, int64_t steps_per_epoch,
                                      const torch::Device& device, std::ostream& out) {
  const JobConfig variant_config = with_variant(config, v);
  const ssl::TrainerOptions t =
      job_options::trainer_options(variant_config, steps_per_epoch, o.device);
  const data::ViewOptions views = job_options::view_options(variant_config);
  ssl::SslViewShapes shapes;
  shapes.global_tokens = int64_t{views.global_grid} * views.global_grid;
  shapes.local_tokens = int64_t{views.local_grid} * views.local_grid;
  shapes.local_views = views.local_views;
  shapes.glimpse_tokens = views.glimpse_tokens();
  shapes.glimpses = views.glimpses;
  const bool bf16 = v.precision != "fp32";
  const double model_flops =
      static_cast<double>(ssl::ssl_step_flops(t.backbone, t.head, shapes, t.supervised).total()) *
      static_cast<double>(batch);
  const double peak = resolve_peak_tflops(
      o.peak_tflops > 0 ? o.peak_tflops : config.ssl.peak_tflops, o.device, v.precision);
  out << fmt::format("matrix products and attention of {} at batch {}, alone ({}):\n", v.name,
                     batch, bf16 ? "bf16" : "fp32");
  nlohmann::ordered_json j = {{"variant", v.name}, {"batch", batch}};
  try {
    StepShapes step_shapes;
    step_shapes.passes =
        ssl::step_passes(t.backbone, t.head, shapes, batch, t.batched_glimpses, t.supervised);
    step_shapes.products =
        ssl::step_products(t.backbone, t.head, shapes, batch, t.batched_glimpses, t.supervised);
    step_shapes.depth = t.backbone.depth;
    step_shapes.heads = t.backbone.heads;
    step_shapes.width = t.backbone.width;
    model::set_fused_attention(v.fused_attention);  // attention as the variant runs it
    j.update(time_step_shapes(step_shapes, device, bf16 ? torch::kBFloat16 : torch::kFloat, o.steps,
                              model_flops, peak, out));
  } catch (const c10::Error& e) {  // on a GPU, a batch whose products do not fit
    model::set_fused_attention(true);
    if (!device.is_cuda()) throw;
    j["failure"] = e.what_without_backtrace();
    out << "  failed: " << e.what_without_backtrace() << "\n";
  }
  model::set_fused_attention(true);
  return j;
}

// Whether the device still runs work: after a fault (an illegal address in a kernel) a CUDA
// context is lost for good, and every later variant of this process would fail with it.
bool device_usable(const torch::Device& device) {
  try {
    (torch::ones({1}, torch::TensorOptions().device(device)) + 1).sum().item<float>();
    synchronize(device);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Ends the process (exit kStepBenchDeviceLost) when one variant runs past `seconds`: a hung
// lever (a wait on the device that never returns) costs only itself. The JSON then still
// names the variant as running, which --resume turns into a failed row.
class VariantWatchdog {
 public:
  explicit VariantWatchdog(double seconds) : seconds_(seconds) {
    if (seconds > 0) thread_ = std::thread([this] { watch(); });
  }
  ~VariantWatchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  VariantWatchdog(const VariantWatchdog&) = delete;
  VariantWatchdog& operator=(const VariantWatchdog&) = delete;

  void arm(const std::string& what) {
    const std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds_));
    armed_ = true;
    changed_.notify_all();
  }
  void disarm() {
    const std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
    changed_.notify_all();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      if (!armed_) {
        changed_.wait(lock);
      } else if (changed_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
                 !stopping_ && std::chrono::steady_clock::now() >= deadline_) {
        fmt::print(stderr,
                   "bench step: {} still running after {} s (--variant-timeout): ending the "
                   "process; --resume with the same options measures the rest\n",
                   what_, seconds_);
        std::_Exit(kStepBenchDeviceLost);
      }
    }
  }

  const double seconds_;
  std::mutex mutex_;  // guards the fields below
  std::condition_variable changed_;
  bool armed_ = false, stopping_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace

int run_step_bench(const StepBenchOptions& o, std::ostream& out) {
  if (o.warmup < 0 || o.steps < 1 || o.phase_steps < 0)
    throw std::invalid_argument("--warmup >= 0, --steps >= 1 and --phase-steps >= 0 expected");
  const JobConfig config = load_config(o.config_path);
  const torch::Device device(o.device);
  at::set_num_threads(job_options::resolve_threads(o.threads > 0 ? o.threads : config.ssl.threads));
  const int world = static_cast<int>(config.cluster.total(&NodeSpec::learners));
  std::vector<int64_t> batches = o.batches;
  if (batches.empty()) batches = {job_options::per_rank_batch(config, std::max(world, 1))};
  std::vector<Variant> variants;
  for (const std::string& text :
       o.variants.empty() ? std::vector<std::string>{"config"} : o.variants) {
    variants.push_back(parse_variant(text, config));
    if (text != "config" && variants.back().cuda_graphs && !device.is_cuda())
      throw std::invalid_argument("--variants " + text +
                                  ": CUDA graphs (ssl.cuda_graphs) need --device cuda");
    if (text != "config" && variants.back().prefetch && !device.is_cuda())
      throw std::invalid_argument(
          "--variants " + text +
          ": prefetch (ssl.prefetch_to_device) stages batches to a GPU, needs --device cuda");
  }
  // After the config and the variants: a machine without a GPU checks what a GPU call would run.
  if (device.is_cuda() && !torch::cuda::is_available())
    throw std::invalid_argument("--device " + o.device + ": no CUDA device (or a CPU LibTorch)");
  const int64_t steps_per_epoch =
      config.ssl.steps_per_epoch > 0 ? config.ssl.steps_per_epoch : 1000;
  const std::string device_name =
      device.is_cuda() ? cuda_device_name(device.index() < 0 ? 0 : device.index()) : "cpu";
  const nlohmann::ordered_json step =
      o.json_path.empty() ? nlohmann::ordered_json() : step_description(config, o, steps_per_epoch);

  // Rows are printed, and the JSON rewritten, as each variant finishes: a process the device
  // kills (a fault in a kernel, the lease's time limit) keeps the figures measured before it,
  // and --resume measures the rest.
  const double per_phase = o.phase_steps > 0 ? 1e3 / o.phase_steps : 0;
  double flop_per_image = 0;
  std::vector<nlohmann::ordered_json> rows;      // as written to the JSON: resumed, then measured
  std::vector<nlohmann::ordered_json> products;  // with o.products, one per batch
  if (o.resume) rows = resumed_rows(o, per_phase, flop_per_image);
  out << fmt::format("bench step: {} on {} ({}), {} timed steps after {} warm-up\n", o.config_path,
                     o.device, device_name, o.steps, o.warmup);
  out << fmt::format(
             "{:<40} {:>6} {:>10} {:>9} {:>9} {:>6} {:>7}  {:>8} {:>8} {:>6} {:>8} {:>7} {:>6}  "
             "{:>9}\n",
             "variant", "batch", "images/s", "step ms", "TFLOP/s", "MFU", "GiB", "teacher",
             "student", "loss", "backward", "update", "other", "loss diff")
      << std::flush;
  const auto write_json = [&](const nlohmann::ordered_json& running) {
    if (!o.json_path.empty())
      write_file_bytes(o.json_path,
                       rows_json(o, device_name, step, flop_per_image, rows, running, products));
  };
  VariantWatchdog watchdog(o.variant_timeout_s);
  for (const int64_t batch : batches) {
    if (batch < 1) throw std::invalid_argument("--batch: expected >= 1");
    std::vector<data::SslBatch> batches_of[2];  // cut by the data plane, by the trainer
    for (const Variant& v : variants) {
      const auto kept = std::find_if(rows.begin(), rows.end(),
                                     [&](const auto& r) { return same_row(r, v.name, batch); });
      if (kept != rows.end()) {
        const nlohmann::ordered_json& failure = kept->at("failure");
        out << fmt::format("{:<40} {:>6}  kept from {}{}\n", v.name, batch, o.json_path,
                           failure.is_null() ? "" : ": failed: " + failure.get<std::string>());
        continue;
      }
      std::vector<data::SslBatch>& data = batches_of[v.learner_cuts ? 1 : 0];
      if (data.empty())
        data = synthetic_batches(config, batch, 2, v.learner_cuts, o.image_width, o.image_height);
      Row row;
      row.variant = v.name;
      row.batch = batch;
      bool recorded = false;
      // Into the table and the JSON at once: a process the device kills later keeps it. The
      // losses are compared with the first row at this batch that ran, measured or resumed
      // (a variant that faulted first leaves the rest compared with the next).
      const auto record = [&] {
        const auto reference = std::find_if(rows.begin(), rows.end(), [&](const auto& r) {
          return r.at("batch") == batch && r.at("failure").is_null();
        });
        if (!row.failure.empty()) {
          row.max_loss_rel_diff = NAN;
        } else if (reference == rows.end()) {
          row.loss_reference = row.variant;
        } else {
          row.loss_reference = reference->at("variant").get<std::string>();
          const std::vector<double> losses = row_losses(*reference);
          for (size_t i = 0; i < std::min(losses.size(), row.losses.size()); ++i)
            row.max_loss_rel_diff =
                std::max(row.max_loss_rel_diff, std::abs(row.losses[i] - losses[i]) /
                                                    std::max(1e-12, std::abs(losses[i])));
        }
        row.config_keys = config_keys(config, v);
        rows.push_back(row_json(row, per_phase));
        out << row_line(row, per_phase) << std::flush;
        write_json(nullptr);
        recorded = true;
      };
      write_json({{"variant", v.name}, {"batch", batch}});
      watchdog.arm(fmt::format("{} at batch {}", v.name, batch));
      try {
        measure(o, config, v, steps_per_epoch, device, data,
                !o.profile_path.empty() && batch == batches.back() && &v == &variants.back(), row,
                flop_per_image, record);
      } catch (const std::exception& e) {
        // On a GPU a variant that fails (a batch too large for the device is a figure too; a
        // fused kernel cuBLASLt refuses) becomes a row saying why, and the rest runs: one
        // lever must not cost the others' figures of a device lease. On the CPU an error is a
        // bug: it stops the bench.
        if (!device.is_cuda()) throw;
        const c10::Error* torch_error = dynamic_cast<const c10::Error*>(&e);
        const std::string what = torch_error ? torch_error->what_without_backtrace() : e.what();
        if (recorded) {
          fmt::print(stderr, "bench step: {} after its row: {}\n", v.name, what);
        } else {
          row = Row{};
          row.variant = v.name;
          row.batch = batch;
          row.failure = what.find("out of memory") != std::string::npos
                            ? Row::kOutOfMemory
                            : what.substr(0, what.find('\n'));
          record();
        }
        if (!device_usable(device)) {
          fmt::print(stderr,
                     "bench step: the device is lost after {} at batch {} (its CUDA context "
                     "fails every call): the rest needs a new process, `--resume` with the "
                     "same options measures it\n",
                     v.name, batch);
          return kStepBenchDeviceLost;
        }
      }
      watchdog.disarm();
      model::set_fused_attention(true);
      model::set_folded_layerscale(true);
    }
    if (o.products) {
      products.push_back(
          products_alone(o, config, variants.back(), batch, steps_per_epoch, device, out));
      write_json(nullptr);
    }
  }
  out << fmt::format(
      "{:.1f} GFLOP per image (model FLOPs: forward teacher, forward + backward student)\n"
      "GiB: peak device memory of the variant's trainer (CUDA); "
      "phases: ms per step, each ended by a device synchronisation (extra steps after the "
      "timed ones); loss diff: largest relative difference of a step's loss from the first "
      "variant's on the same batches; one device, so no gradient all-reduce (saccade bench "
      "allreduce measures it; docs/scaling.md adds the two)\n",
      flop_per_image / 1e9);
  return 0;
}

}  // namespace saccade::bench
