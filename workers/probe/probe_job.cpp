#include "workers/probe/probe_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "common/file_bytes.h"
#include "common/seconds_since.h"
#include "dataloader/dataset_factory.h"
#include "model/weights.h"
#include "storage/checkpoint_store.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/probe_options.h"
#include "workers/probe/probe.h"
#include "workers/probe/task_head.h"
#include "workers/probe/transformer_probe.h"
#include "workers/teacher/teacher_backbone.h"

namespace saccade::probe {
namespace {

std::string report_json(const ProbeReport& r, const JobConfig& config) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ProbeScores& s : r.rows) {
    nlohmann::ordered_json row = {{"name", s.name},
                                  {"vit_knn", s.vit_knn},
                                  {"vit_linear", s.vit_linear},
                                  {"vit_c", s.vit_c},
                                  {"task_c", s.task_c},
                                  {"step_knn", s.step_knn},
                                  {"step_linear", s.step_linear}};
    if (s.transformer_head) {  // NaN k-NN is written as null; C does not apply
      row.erase("vit_c");
      row.erase("task_c");
      row["vit_lr"] = s.vit_lr;
      row["vit_steps"] = s.vit_steps;
      row["task_lr"] = s.task_lr;
      row["task_steps"] = s.task_steps;
    }
    rows.push_back(row);
  }
  nlohmann::ordered_json j = {{"checkpoint_step", r.checkpoint_step},
                              {"backbone_file", r.backbone_file},
                              {"train_images", r.train_images},
                              {"val_images", r.val_images},
                              {"skipped_corrupt", r.skipped_corrupt},
                              {"features", config.probe.features},
                              {"head", config.probe.head},
                              {"knn_k", config.probe.knn_k},
                              {"knn_temperature", config.probe.knn_temperature},
                              {"holdout_fraction", config.probe.holdout_fraction},
                              {"feature_seconds", r.feature_seconds},
                              {"fit_seconds", r.fit_seconds},
                              {"rows", rows}};
  if (!r.supervised_dir.empty())
    j["supervised"] = {{"dir", r.supervised_dir},
                       {"steps", r.supervised_steps},
                       {"seconds", r.supervised_seconds},
                       {"images_per_second", r.supervised_images_per_second}};
  return j.dump(1) + "\n";
}

ProbeScores scores_of(const std::string& name, const BackboneEvaluation& e) {
  ProbeScores s;
  s.name = name;
  s.vit_knn = e.vit.knn;
  s.vit_linear = e.vit.linear;
  s.vit_c = e.vit_head.c;
  s.task_c = e.task_head.c;
  for (const ModeScores& m : e.steps) {
    s.step_knn.push_back(m.knn);
    s.step_linear.push_back(m.linear);
  }
  return s;
}

// Which rows beyond NAME (the first state token) probe.features asks for.
struct FeatureRows {
  bool all_states = false;    // NAME/all_states: every state token concatenated
  bool patch_mean = false;    // NAME/state_and_patch_mean: first state token + mean patch token
  bool glimpse_mean = false;  // NAME/glimpse_mean: first state token averaged over glimpses 1..k
};

// The rows NAME/FEATURE: the same images and labels, other features of the same backbone.
// `first_state`: NAME's own evaluation when it has one (the glimpse_mean row's ViT mode is
// NAME's, the same features: copied, not refitted).
void add_feature_rows(const std::string& name, const ProbeFeatures& train, const ProbeFeatures& val,
                      const FeatureRows& rows, int64_t classes, const EvaluationOptions& eval,
                      const BackboneEvaluation* first_state, ProbeReport& report) {
  auto add = [&](const char* feature, auto vit_of, auto steps_of,
                 const BackboneEvaluation* vit_from = nullptr) {
    ProbeFeatures t = train, v = val;
    t.vit = vit_of(train);
    t.steps = steps_of(train);
    v.vit = vit_of(val);
    v.steps = steps_of(val);
    report.rows.push_back(
        scores_of(name + "/" + feature, evaluate_backbone(t, v, classes, eval, vit_from)));
  };
  if (rows.all_states)
    add(
        "all_states", [](const ProbeFeatures& f) { return f.vit_all_states; },
        [](const ProbeFeatures& f) { return f.steps_all_states; });
  if (rows.patch_mean)  // side by side, as DINOv2's linear eval reads a ViT
    add(
        "state_and_patch_mean",
        [](const ProbeFeatures& f) {
          return torch::cat({f.vit, f.vit_patch_mean}, 1);
        },
        [](const ProbeFeatures& f) {
          return torch::cat({f.steps, f.steps_patch_mean}, 2);
        });
  if (rows.glimpse_mean)
    add(
        "glimpse_mean", [](const ProbeFeatures& f) { return f.vit; },
        [](const ProbeFeatures& f) { return mean_over_glimpses(f.steps); }, first_state);
}

// Every state token of features [.., N, S*D] as [V, N, S, D].
torch::Tensor state_tokens(const torch::Tensor& all_states, int64_t views, int64_t s) {
  const int64_t n = all_states.size(-2);
  return all_states.reshape({views, n, s, all_states.size(-1) / s});
}

// The transformer heads (ViT mode and glimpses) of one backbone's features,
// scored on the validation split as the row NAME/transformer_head.
ProbeHeads fit_transformer_heads(const std::string& name, const ProbeFeatures& train,
                                 const ProbeFeatures& val, int64_t n_state, int64_t classes,
                                 const TransformerProbeOptions& options, ProbeReport& report) {
  const int64_t k = train.steps_all_states.size(0);
  TransformerClassifier vit = fit_transformer_probe(state_tokens(train.vit_all_states, 1, n_state),
                                                    train.labels, classes, options);
  TransformerClassifier task = fit_transformer_probe(
      state_tokens(train.steps_all_states, k, n_state), train.labels, classes, options);
  ProbeScores row;
  row.name = name + "/transformer_head";
  row.transformer_head = true;
  row.vit_knn = std::nan("");
  row.vit_linear =
      head_accuracy(vit.head, state_tokens(val.vit_all_states, 1, n_state)[0], val.labels);
  const torch::Tensor val_steps = state_tokens(val.steps_all_states, k, n_state);
  for (int64_t g = 0; g < k; ++g) {
    row.step_knn.push_back(std::nan(""));
    row.step_linear.push_back(head_accuracy(task.head, val_steps[g], val.labels));
  }
  row.vit_lr = vit.lr;
  row.vit_steps = vit.steps;
  row.task_lr = task.lr;
  row.task_steps = task.steps;
  report.rows.push_back(row);
  return {task.head, vit.head, -1, "", 0};
}

using Clock = std::chrono::steady_clock;

// What decides the supervised baseline's weights, as TOML: `sup` without
// the keys that only say where and how a run is watched or placed.
std::string supervised_recipe(const JobConfig& sup) {
  const JobConfig defaults = default_config();
  JobConfig r = sup;
  r.job.name = r.job.work_dir = "";
  r.job.stages = {};
  r.cluster = defaults.cluster;
  r.logging = defaults.logging;
  r.probe = defaults.probe;  // probe.supervised_steps: the checkpoints' steps say it
  r.policy = defaults.policy;
  r.eval = defaults.eval;
  return to_toml(r);
}

// The supervised baseline: `config`'s backbone, views and [ssl] keys trained
// with labels (a K = `classes` head) for probe.supervised_steps in
// job.work_dir/supervised. What an earlier probe left there is resumed when it
// was trained with the same recipe for at most these steps, else trained
// again. Returns its teacher backbone (as in DINO's rows, the EMA is probed).
std::string train_supervised_baseline(const JobConfig& config, int64_t classes,
                                      int64_t dataset_size, const ProbeRunOptions& run,
                                      ProbeReport& report) {
  if (!run.pretrain)
    throw std::invalid_argument("probe: the supervised baseline needs a pretraining function");
  JobConfig sup = config;
  sup.ssl.objective = "supervised";
  sup.ssl.head_prototypes = classes;
  const std::filesystem::path dir =
      std::filesystem::path(config.job.work_dir) / kSupervisedBaselineDir;
  sup.job.work_dir = dir.string();
  const int64_t budget = config.ssl.epochs * job_options::steps_per_epoch(config, dataset_size);
  const int64_t steps =
      config.probe.supervised_steps > 0 ? std::min(config.probe.supervised_steps, budget) : budget;
  const std::string recipe = supervised_recipe(sup);
  const std::filesystem::path recipe_file = dir / "recipe.toml";
  if (std::filesystem::exists(dir)) {
    std::string why;
    if (!std::filesystem::exists(recipe_file) || read_file_bytes(recipe_file) != recipe) {
      why = "another recipe";
    } else if (std::filesystem::exists(dir / "checkpoints.db")) {
      storage::StoreOptions read_only;
      read_only.read_only = true;
      const auto latest =
          storage::CheckpointStore::open((dir / "checkpoints.db").string(), read_only)->latest();
      if (latest && latest->step > steps)
        why = fmt::format("{} steps, more than these {}", latest->step, steps);
    }
    if (!why.empty()) {
      spdlog::warn("probe: {} holds a supervised baseline of {}: training it again", dir.string(),
                   why);
      std::filesystem::remove_all(dir);
    }
  }
  std::filesystem::create_directories(dir);
  write_file_bytes(recipe_file, recipe);
  spdlog::info("probe: the supervised baseline, {} steps in {}", steps, dir.string());
  const auto t0 = Clock::now();
  const PretrainedBackbone trained = run.pretrain(sup, steps, run.on_progress);
  report.supervised_dir = dir.string();
  report.supervised_steps = trained.steps;
  if (trained.steps > trained.first_step) {
    report.supervised_seconds = seconds_since(t0);
    report.supervised_images_per_second = trained.images_per_second;
  }
  spdlog::info("probe: supervised baseline at step {} ({} trained now in {:.0f} s)", trained.steps,
               trained.steps - trained.first_step, report.supervised_seconds);
  return read_file_bytes(trained.backbone_path);  // the teacher's, exported by run_pretrain
}

}  // namespace

std::string format_probe_table(const ProbeReport& r) {
  auto cells = [](double knn, double linear) {
    return fmt::format("{:>8}{:>8.1f}", std::isnan(knn) ? "-" : fmt::format("{:.1f}", 100 * knn),
                       100 * linear);
  };
  const size_t steps = r.rows.empty() ? 0 : r.rows[0].step_knn.size();
  std::string out = fmt::format("{:<34}{:>16}", "top-1 (%)", "ViT mode");
  for (size_t k = 0; k < steps; ++k) out += fmt::format("{:>16}", fmt::format("glimpse {}", k + 1));
  out += fmt::format("\n{:<34}", "");
  for (size_t k = 0; k <= steps; ++k) out += fmt::format("{:>8}{:>8}", "k-NN", "linear");
  out += "\n";
  for (const ProbeScores& s : r.rows) {
    out += fmt::format("{:<34}", s.name) + cells(s.vit_knn, s.vit_linear);
    for (size_t k = 0; k < s.step_knn.size(); ++k) out += cells(s.step_knn[k], s.step_linear[k]);
    out += "\n";
  }
  return out;
}

ProbeReport run_probe(const JobConfig& config, const ProbeRunOptions& run) {
  at::set_num_threads(job_options::resolve_threads(config.ssl.threads));
  if (run.random_init) return probe_backbone(config, teacher::initial_backbone(config), -1, run);
  if (!run.backbone_file.empty())
    return probe_backbone(config, read_file_bytes(run.backbone_file), -1, run);
  const teacher::TeacherBackbone teacher = teacher::load_teacher_backbone(config, run.step);
  ProbeReport report = probe_backbone(config, teacher.safetensors, teacher.step, run);
  report.checkpoint_db = teacher.db;
  return report;
}

ProbeReport probe_backbone(const JobConfig& config, const std::string& backbone_safetensors,
                           int64_t step, const ProbeRunOptions& run) {
  ProbeReport report;
  report.checkpoint_step = step;
  report.backbone_file = run.backbone_file;
  model::FovealBackbone backbone = model::import_backbone(backbone_safetensors);

  const auto train_set =
      data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
  const auto val_set = data::make_dataset(job_options::dataset_spec(config, /*validation=*/true));
  if (train_set->num_classes() < 2)
    throw std::runtime_error("the probe needs labels: the training split has no classes");
  const auto& baselines = config.probe.baselines;
  auto wants = [&](const char* b) {
    return std::find(baselines.begin(), baselines.end(), b) != baselines.end();
  };
  // Which rows the report has (the features they read: job_options::feature_options).
  const auto& features = config.probe.features;
  auto asks_for = [&](const char* feature) {
    return std::find(features.begin(), features.end(), feature) != features.end();
  };
  const bool first_state = asks_for("first_state");
  FeatureRows feature_rows;
  feature_rows.all_states = asks_for("all_states");
  feature_rows.patch_mean = asks_for("state_and_patch_mean");
  feature_rows.glimpse_mean = asks_for("glimpse_mean");
  const bool transformer = config.probe.head == "transformer";  // reads every state token
  FeatureOptions train_features =
      job_options::feature_options(config, job_options::FeaturesFor::kProbeTrain);
  if (run.max_train_images > 0) train_features.max_images = run.max_train_images;
  train_features.on_progress = run.on_progress;
  FeatureOptions val_features =
      job_options::feature_options(config, job_options::FeaturesFor::kProbeValidation);
  if (run.max_val_images > 0) val_features.max_images = run.max_val_images;
  val_features.on_progress = run.on_progress;
  const data::ViewOptions views = job_options::view_options(config);

  EvaluationOptions eval = job_options::evaluation_options(config);
  eval.linear.on_progress = run.on_progress;
  const int64_t classes = train_set->num_classes();
  const int64_t n_state = backbone->options().n_state;
  TransformerProbeOptions head_options =
      job_options::transformer_probe_options(config, backbone->options().heads);
  head_options.on_progress = run.on_progress;

  auto t0 = Clock::now();
  const ProbeFeatures train = extract_probe_features(*backbone, *train_set, views, train_features);
  const ProbeFeatures val = extract_probe_features(*backbone, *val_set, views, val_features);
  report.feature_seconds += seconds_since(t0);
  report.train_images = train.labels.size(0);
  report.val_images = val.labels.size(0);
  report.skipped_corrupt = train.skipped_corrupt + val.skipped_corrupt;
  spdlog::info("probe: features of {} + {} images in {:.1f} s ({} corrupt skipped)",
               report.train_images, report.val_images, report.feature_seconds,
               report.skipped_corrupt);
  t0 = Clock::now();
  // The linear heads (first state token); the transformer heads below read every state token.
  const BackboneEvaluation probed = evaluate_backbone(train, val, classes, eval);
  const std::string name = run.random_init ? "random_init" : "pretrained";
  if (first_state) report.rows.push_back(scores_of(name, probed));
  add_feature_rows(name, train, val, feature_rows, classes, eval, &probed, report);
  ProbeHeads heads{{probed.task_head.weight, probed.task_head.bias},
                   {probed.vit_head.weight, probed.vit_head.bias},
                   step,
                   "",
                   0};
  if (transformer)
    heads = fit_transformer_heads(name, train, val, n_state, classes, head_options, report);
  report.fit_seconds += seconds_since(t0);

  // A baseline backbone's rows, on the same images, gazes and features.
  auto probe_baseline = [&](const std::string& row, const std::string& safetensors) {
    model::FovealBackbone other = model::import_backbone(safetensors);
    t0 = Clock::now();
    FeatureOptions no_pixels = train_features;
    no_pixels.pixels = false;
    const ProbeFeatures train0 = extract_probe_features(*other, *train_set, views, no_pixels);
    no_pixels = val_features;
    no_pixels.pixels = false;
    const ProbeFeatures val0 = extract_probe_features(*other, *val_set, views, no_pixels);
    report.feature_seconds += seconds_since(t0);
    t0 = Clock::now();
    std::optional<BackboneEvaluation> first0;
    if (first_state) {
      first0 = evaluate_backbone(train0, val0, classes, eval);
      report.rows.push_back(scores_of(row, *first0));
    }
    add_feature_rows(row, train0, val0, feature_rows, classes, eval, first0 ? &*first0 : nullptr,
                     report);
    if (transformer)
      fit_transformer_heads(row, train0, val0, n_state, classes, head_options, report);
    report.fit_seconds += seconds_since(t0);
  };
  if (!run.random_init && wants("random_init"))
    probe_baseline("random_init", teacher::initial_backbone(config));
  if (wants("supervised"))
    probe_baseline("supervised",
                   train_supervised_baseline(config, classes, train_set->size(), run, report));
  if (wants("pixels")) {
    t0 = Clock::now();
    ProbeScores pixels;
    pixels.name = "pixels";
    LinearClassifier head;
    const ModeScores m =
        evaluate_view(train.pixels, train.labels, val.pixels, val.labels, classes, eval, &head);
    pixels.vit_knn = m.knn;
    pixels.vit_linear = m.linear;
    pixels.vit_c = head.c;
    report.rows.push_back(pixels);
    report.fit_seconds += seconds_since(t0);
  }

  const std::filesystem::path dir = config.job.work_dir;
  std::filesystem::create_directories(dir);
  report.report_path = (dir / (run.random_init ? "probe_random_init.json" : "probe.json")).string();
  // The policy stage reads the head beside the checkpoint it was fitted on, or beside the
  // name of the backbone file it was fitted on (a backbone trained on another machine).
  if (!run.random_init) {
    report.head_path = (dir / kProbeHeadFile).string();
    heads.checkpoint_step = report.checkpoint_step;
    if (!run.backbone_file.empty()) {
      heads.backbone_file = std::filesystem::absolute(run.backbone_file).string();
      heads.backbone_crc32 = storage::crc32_of(backbone_safetensors);
    }
    std::map<std::string, std::string> extra;
    if (!transformer) extra["c"] = fmt::format("{}", probed.task_head.c);
    report.head_safetensors = serialize_probe_heads(heads, extra);
    write_file_bytes(report.head_path, report.head_safetensors);
  }
  report.json = report_json(report, config);
  write_file_bytes(report.report_path, report.json);
  return report;
}

}  // namespace saccade::probe
