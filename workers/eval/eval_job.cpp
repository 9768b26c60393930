#include "workers/eval/eval_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "common/file_bytes.h"
#include "common/seconds_since.h"
#include "dataloader/dataset_factory.h"
#include "dataloader/resized_dataset.h"
#include "model/flops.h"
#include "model/weights.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/job_options/probe_options.h"
#include "workers/policy/policy_stage.h"
#include "workers/policy/rollout_source.h"
#include "workers/probe/probe.h"

namespace saccade::eval {
namespace {

using Clock = std::chrono::steady_clock;

bool has(const std::vector<std::string>& list, const char* item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

policy::GazeSource source_of(const std::string& mode) {
  if (mode == "random") return policy::GazeSource::kRandom;
  if (mode == "scan") return policy::GazeSource::kScan;
  if (mode == "policy" || mode == "fixed_path") return policy::GazeSource::kPolicyMode;
  throw std::invalid_argument(fmt::format("eval: no gaze source for mode \"{}\"", mode));
}

// Everything one evaluation pass needs, built once.
struct Models {
  policy::PolicyStage stage;
  model::GazePolicy policy{nullptr};
  model::GazePolicy fixed_path{nullptr};  // the learned fixed path (mode fixed_path)
};

// The weights of a gaze policy for `mode`, refused with `origin` and the reason.
model::GazePolicy load_gaze_policy(const policy::PolicyStage& stage, const std::string& bytes,
                                   const std::string& origin, const std::string& mode,
                                   const char* stage_hint) {
  if (bytes.empty())
    throw EvalInputError(
        fmt::format("eval.modes has \"{}\" but its weights were not given: {}, or drop \"{}\" from "
                    "eval.modes",
                    mode, stage_hint, mode));
  model::GazePolicy policy(stage.policy_options);
  try {
    model::load_modules({{"", policy.get()}}, bytes);
  } catch (const std::exception& e) {
    throw EvalInputError(
        fmt::format("{}: {} (does [policy] match the policy trained?)", origin, e.what()));
  }
  policy->eval();
  return policy;
}

// Top-1 of one ViT-mode step over a `grid` x `grid` grid, on the first n images
// in batches of `batch`, as features `o` say (job_options::FeaturesFor::kEvalVit).
double vit_accuracy(Models& m, const data::Dataset& dataset, data::ViewOptions views, int64_t grid,
                    int64_t n, int64_t batch, probe::FeatureOptions o) {
  views.vit_grid = static_cast<int>(grid);
  o.max_images = n;
  o.batch_size = batch;
  const probe::ProbeFeatures f =
      probe::extract_probe_features(*m.stage.backbone, dataset, views, o);
  const int64_t s = m.stage.backbone->options().n_state;
  return probe::head_accuracy(m.stage.vit_head, f.vit_all_states.reshape({f.labels.size(0), s, -1}),
                              f.labels);
}

// Top-1 per glimpse of one gaze mode on the first n validation images resized
// by `scale`, the traces run by `rollouts` (eval actors, or this process) as
// `o` says (job_options::GazeEvalFor::kEvalStage).
policy::GazeEvaluation gaze_accuracy(Models& m, policy::RolloutSource& rollouts,
                                     const std::string& mode, int64_t dataset_size, double scale,
                                     int64_t n, policy::GazeEvalOptions o) {
  o.max_images = n;
  o.scale = scale;
  if (mode == "fixed_path") {  // the learned fixed path: state-blind, weights of their own
    o.state_blind = true;
    o.policy_version = 2;  // eval actors cache a policy's weights by version
  }
  const policy::GazeSource source = source_of(mode);
  model::GazePolicyImpl* policy = !policy::needs_policy(source) ? nullptr
                                  : mode == "fixed_path"        ? m.fixed_path.get()
                                                                : m.policy.get();
  return policy::evaluate_gazes(rollouts, policy, source, dataset_size, o);
}

std::string report_json(const EvalReport& r, const JobConfig& config) {
  nlohmann::ordered_json curves = nlohmann::ordered_json::array();
  for (const EvalCurve& c : r.curves)
    curves.push_back({{"mode", c.mode},
                      {"accuracy", c.accuracy},
                      {"gaze_spread", c.gaze_spread},
                      {"mixture_entropy", c.mixture_entropy}});
  nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
  for (const SweepPoint& p : r.sweep)
    sweep.push_back({{"mode", p.mode},
                     {"scale", p.scale},
                     {"image_side", p.image_side},
                     {"accuracy", p.accuracy},
                     {"tokens", p.tokens},
                     {"gflops", p.gflops},
                     {"ms_per_image", p.ms_per_image}});
  const nlohmann::ordered_json j = {
      {"checkpoint_step", r.checkpoint_step},
      {"backbone_file", r.backbone_file},
      {"task_head", r.task_head},
      {"images", r.images},
      {"sweep_images", r.sweep_images},
      {"glimpses", r.glimpses},
      {"upscale", config.eval.upscale},
      {"vit_grid", config.views.vit_grid},
      {"glimpse_tokens",
       config.views.multizoom_patches + config.views.fovea_grid * config.views.fovea_grid},
      {"policy_sees_state", r.policy_sees_state},
      {"curves", curves},
      {"sweep", sweep}};
  return j.dump(1) + "\n";
}

}  // namespace

std::string format_eval_table(const EvalReport& r) {
  std::string out =
      fmt::format("top-1 (%) on {} validation images ({} task head), after glimpse\n{:<12}",
                  r.images, r.task_head, "mode");
  for (int64_t k = 1; k <= r.glimpses; ++k) out += fmt::format("{:>7}", k);
  out += "\n";
  for (const EvalCurve& c : r.curves) {
    out += fmt::format("{:<12}", c.mode);
    for (double a : c.accuracy) out += fmt::format("{:>7.1f}", 100 * a);
    if (c.mode == "vit") out += "   (one step over the ViT-mode grid)";
    out += "\n";
  }
  // Where the gazes went: 0 when every image is looked at in the same place.
  out += fmt::format("gaze spread (RMS distance from the mean gaze, short sides)\n");
  for (const EvalCurve& c : r.curves) {
    if (c.gaze_spread.empty()) continue;
    out += fmt::format("{:<12}", c.mode);
    for (double d : c.gaze_spread) out += fmt::format("{:>7.3f}", d);
    out += "\n";
  }
  for (const EvalCurve& c : r.curves) {
    if (c.mixture_entropy.empty()) continue;
    out += fmt::format("mixture-weight entropy per image (nats)\n{:<12}", c.mode);
    for (double h : c.mixture_entropy) out += fmt::format("{:>7.3f}", h);
    out += "\n";
  }
  if (r.sweep.empty()) return out;
  out += fmt::format(
      "\nresolution sweep on {} images: top-1 (%) after the last glimpse, per image: patch "
      "tokens, GFLOPs, ms\n{:<16}{:>7}{:>7}{:>8}{:>10}{:>9}{:>8}\n",
      r.sweep_images, "mode", "scale", "side", "top-1", "tokens", "GFLOPs", "ms");
  for (const SweepPoint& p : r.sweep)
    out += fmt::format("{:<16}{:>6}x{:>7}{:>8.1f}{:>10}{:>9.4f}{:>8.2f}\n", p.mode, p.scale,
                       p.image_side, 100 * p.accuracy, p.tokens, p.gflops, p.ms_per_image);
  return out;
}

EvalReport evaluate_models(const JobConfig& config, const EvalInputs& in,
                           const EvalRunOptions& run) {
  const auto& modes = config.eval.modes;
  if (modes.empty()) throw EvalInputError("eval.modes is empty: nothing to evaluate");
  Models m{{}, nullptr};
  try {
    m.stage = policy::policy_stage_from(config, in.probe.head_bytes, in.probe.head_origin,
                                        in.probe.backbone_safetensors);
  } catch (const std::runtime_error& e) {
    throw EvalInputError(e.what());  // a head that is not one, or does not fit the backbone
  }
  const bool wants_vit = has(modes, "vit") || !config.eval.scales.empty();
  if (wants_vit && !m.stage.vit_head.defined())
    throw EvalInputError(fmt::format(
        "{} has no ViT-mode head: it was written before the probe saved one; run the probe "
        "again, or drop \"vit\" from eval.modes and set eval.scales = []",
        in.probe.head_origin));
  if (has(modes, "policy"))
    m.policy = load_gaze_policy(m.stage, in.policy_bytes, in.policy_origin, "policy",
                                "run the policy stage first");
  if (has(modes, "fixed_path"))
    m.fixed_path =
        load_gaze_policy(m.stage, in.fixed_path_bytes, in.fixed_path_origin, "fixed_path",
                         "run the policy stage with policy.fixed_path_baseline = true first");
  for (auto& p : m.stage.backbone->parameters()) p.set_requires_grad(false);

  EvalReport report;
  report.checkpoint_step = m.stage.checkpoint_step;
  report.backbone_file = m.stage.backbone_file;
  report.task_head = m.stage.head.kind();
  report.glimpses = config.eval.glimpses;
  report.policy_sees_state = config.policy.sees_state;
  const std::shared_ptr<const data::Dataset> val =
      data::make_dataset(job_options::dataset_spec(config, /*validation=*/true));
  const data::ViewOptions views = job_options::view_options(config);
  const int64_t images = run.max_images > 0 ? run.max_images : config.eval.images;
  report.images = images > 0 ? std::min(images, val->size()) : val->size();
  const int64_t vit_grid = config.views.vit_grid;
  probe::FeatureOptions vit_features =
      job_options::feature_options(config, job_options::FeaturesFor::kEvalVit);
  vit_features.on_progress = run.on_progress;
  policy::GazeEvalOptions gaze_eval =
      job_options::gaze_eval_options(config, job_options::GazeEvalFor::kEvalStage);
  gaze_eval.on_progress = run.on_progress;
  // Glimpse traces run on the eval actors when there are some; the ViT modes
  // (one step per image) run here.
  policy::LocalRollouts local(*m.stage.backbone, m.stage.head, *val, views);
  policy::RolloutSource& rollouts = run.rollouts ? *run.rollouts : local;

  for (const std::string& mode : modes) {
    const auto t0 = Clock::now();
    EvalCurve c;
    c.mode = mode;
    if (mode == "vit") {
      c.accuracy = {vit_accuracy(m, *val, views, vit_grid, report.images, config.eval.batch_size,
                                 vit_features)};
    } else {
      const policy::GazeEvaluation g =
          gaze_accuracy(m, rollouts, mode, val->size(), 1.0, report.images, gaze_eval);
      c.accuracy = g.accuracy;
      c.gaze_spread = g.gaze_spread;
      c.mixture_entropy = g.mixture_entropy;
    }
    spdlog::info("eval: {} on {} images in {:.1f} s, top-1 after the last step {:.2f}%", mode,
                 report.images, seconds_since(t0), 100 * c.accuracy.back());
    report.curves.push_back(std::move(c));
  }

  // The sweep: every mode, and a ViT whose patches keep their pixel size (its
  // grid grows with the image), on the same images at each scale.
  const int64_t sweep = run.max_sweep_images > 0 ? run.max_sweep_images : config.eval.sweep_images;
  report.sweep_images = std::min(sweep, val->size());
  const model::BackboneOptions& bo = m.stage.backbone->options();
  const int64_t glimpse_tokens = views.glimpse_tokens();
  std::vector<std::string> sweep_modes = modes;
  sweep_modes.push_back("vit_fixed_patch");
  const int64_t first_side = [&] {
    const cv::Mat& image = data::get_or_next_good(*val, 0).image;
    return static_cast<int64_t>(std::min(image.rows, image.cols));
  }();
  for (const double scale : config.eval.scales) {
    const data::ResizedDataset resized(val, scale, config.eval.upscale == "bilinear");
    for (const std::string& mode : sweep_modes) {
      SweepPoint p;
      p.mode = mode;
      p.scale = scale;
      p.image_side = std::max<int64_t>(1, std::lround(static_cast<double>(first_side) * scale));
      const auto t0 = Clock::now();
      if (mode == "vit" || mode == "vit_fixed_patch") {
        const int64_t grid =
            mode == "vit" ? vit_grid : std::max<int64_t>(1, std::lround(vit_grid * scale));
        // Keep the tokens per forward pass (and attention memory) about constant.
        const int64_t batch =
            std::max<int64_t>(1, config.eval.batch_size * vit_grid * vit_grid / (grid * grid));
        p.accuracy =
            vit_accuracy(m, resized, views, grid, report.sweep_images, batch, vit_features);
        p.tokens = grid * grid;
        p.gflops = 1e-9 * static_cast<double>(model::step_flops(bo, p.tokens).forward());
      } else {
        p.accuracy =
            gaze_accuracy(m, rollouts, mode, val->size(), scale, report.sweep_images, gaze_eval)
                .accuracy.back();
        p.tokens = report.glimpses * glimpse_tokens;
        int64_t flops = model::step_flops(bo, glimpse_tokens).forward();
        flops += (report.glimpses - 1) *
                 model::step_flops(bo, glimpse_tokens, /*carries_state=*/true).forward();
        p.gflops = 1e-9 * static_cast<double>(flops);
      }
      p.ms_per_image = 1e3 * seconds_since(t0) / static_cast<double>(report.sweep_images);
      spdlog::info(
          "eval sweep: {} at x{} ({} px): top-1 {:.2f}%, {} tokens, {:.3f} GFLOPs, "
          "{:.2f} ms per image",
          mode, scale, p.image_side, 100 * p.accuracy, p.tokens, p.gflops, p.ms_per_image);
      report.sweep.push_back(p);
    }
  }

  const std::filesystem::path dir = config.job.work_dir;
  std::filesystem::create_directories(dir);
  report.report_path = (dir / kEvalReportFile).string();
  report.json = report_json(report, config);
  write_file_bytes(report.report_path, report.json);
  return report;
}

EvalReport run_eval(const JobConfig& config, const EvalRunOptions& run) {
  at::set_num_threads(job_options::resolve_threads(config.ssl.threads));
  EvalInputs in;
  in.probe = policy::read_probe_head_inputs(config);
  // A policy stage's weights file for `mode`: its bytes and where they came from.
  const std::filesystem::path dir =
      config.policy.input_dir.empty() ? config.job.work_dir : config.policy.input_dir;
  auto read_weights = [&](const char* mode, const char* file, const char* how, std::string& bytes,
                          std::string& origin) {
    if (!has(config.eval.modes, mode)) return;
    const std::filesystem::path path = dir / file;
    if (!std::filesystem::exists(path))
      throw std::runtime_error(
          fmt::format("{} does not exist: eval.modes has \"{}\"; run `saccade policy CONFIG`{} "
                      "first, or drop \"{}\" from eval.modes",
                      path.string(), mode, how, mode));
    bytes = read_file_bytes(path);
    origin = path.string();
  };
  read_weights("policy", policy::kPolicyFile, "", in.policy_bytes, in.policy_origin);
  read_weights("fixed_path", policy::kFixedPathFile, " with policy.fixed_path_baseline = true",
               in.fixed_path_bytes, in.fixed_path_origin);
  return evaluate_models(config, in, run);
}

}  // namespace saccade::eval
