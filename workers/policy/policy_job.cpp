#include "workers/policy/policy_job.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>

#include "common/file_bytes.h"
#include "dataloader/dataset_factory.h"
#include "model/backbone.h"
#include "model/policy.h"
#include "model/weights.h"
#include "storage/checkpoint_store.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/policy/policy_stage.h"
#include "workers/policy/policy_trainer.h"
#include "workers/policy/rollout_source.h"
#include "workers/probe/task_head.h"
#include "workers/teacher/teacher_backbone.h"

namespace saccade::policy {
namespace {

nlohmann::ordered_json epochs_json(const std::vector<PolicyEpochReport>& epochs) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PolicyEpochReport& e : epochs)
    out.push_back({{"mean_reward", e.mean_reward},
                   {"final_accuracy", e.final_accuracy},
                   {"loss", e.loss},
                   {"clip_fraction", e.clip_fraction},
                   {"kl", e.kl},
                   {"std", e.std},
                   {"seconds", e.seconds},
                   {"rollout_seconds", e.rollout_seconds},
                   {"update_seconds", e.update_seconds}});
  return out;
}

void log_epoch(const char* who, const PolicyEpoch& e, int64_t steps) {
  spdlog::info(
      "{} epoch {}: reward {:.4f}, sampled top-1 after {} glimpses {:.2f}%, clipped {:.3f}, kl "
      "{:.4f}, std {:.3f}, {:.1f} s (rollouts {:.1f} s, updates {:.1f} s; policy version lag 0)",
      who, e.epoch + 1, e.mean_reward, steps, 100 * e.final_accuracy, e.clip_fraction, e.kl, e.std,
      e.seconds, e.rollout_seconds, e.update_seconds);
}

PolicyEpochReport epoch_report(const PolicyEpoch& e) {
  return {e.mean_reward, e.final_accuracy,  e.loss,          e.clip_fraction, e.kl, e.std,
          e.seconds,     e.rollout_seconds, e.update_seconds};
}

std::string report_json(const PolicyReport& r) {
  const nlohmann::ordered_json epochs = epochs_json(r.epochs);
  nlohmann::ordered_json curve = nlohmann::ordered_json::array();
  for (const PolicyCurvePoint& c : r.val_curve)
    curve.push_back({{"batches", c.batches},
                     {"reward", c.reward},
                     {"accuracy", c.accuracy},
                     {"gaze_spread", c.gaze_spread}});
  const nlohmann::ordered_json j = {{"checkpoint_step", r.checkpoint_step},
                                    {"backbone_file", r.backbone_file},
                                    {"task_head", r.task_head},
                                    {"train_images", r.train_images},
                                    {"val_images", r.val_images},
                                    {"sees_state", r.sees_state},
                                    {"reward", r.reward},
                                    {"epochs", epochs},
                                    {"val_curve", curve},
                                    {"random_accuracy", r.random_accuracy},
                                    {"policy_accuracy", r.policy_accuracy},
                                    {"random_gaze_spread", r.random_spread},
                                    {"scan_accuracy", r.scan_accuracy},
                                    {"policy_gaze_spread", r.policy_spread},
                                    {"policy_mixture_entropy", r.policy_entropy},
                                    {"fixed_path_epochs", epochs_json(r.fixed_path_epochs)},
                                    {"fixed_path_accuracy", r.fixed_path_accuracy},
                                    {"fixed_path_gaze_spread", r.fixed_path_spread},
                                    {"fixed_path_mixture_entropy", r.fixed_path_entropy}};
  return j.dump(1) + "\n";
}

std::string percents(const std::vector<double>& a) {
  std::string out;
  for (double v : a) out += fmt::format("{}{:.1f}", out.empty() ? "" : " ", 100 * v);
  return out;
}

}  // namespace

ProbeHeadInputs read_probe_head_inputs(const JobConfig& config) {
  const std::filesystem::path dir =
      config.policy.input_dir.empty() ? config.job.work_dir : config.policy.input_dir;
  const std::filesystem::path path = dir / probe::kProbeHeadFile;
  if (!std::filesystem::exists(path))
    throw std::runtime_error(
        fmt::format("{} does not exist: the policy and the evaluation read the probe's heads, run "
                    "`saccade probe CONFIG` first",
                    path.string()));
  ProbeHeadInputs in{read_file_bytes(path), path.string(), ""};
  // The head was trained on one backbone's features: the later stages use that backbone,
  // a checkpoint's teacher or the file the probe read.
  const probe::ProbeHeads heads = probe::parse_probe_heads(in.head_bytes, in.head_origin);
  if (heads.backbone_file.empty()) {
    in.backbone_safetensors =
        teacher::load_teacher_backbone(config, heads.checkpoint_step, dir.string()).safetensors;
    return in;
  }
  if (!std::filesystem::exists(heads.backbone_file))
    throw std::runtime_error(fmt::format(
        "{} was fitted on the backbone file {}, which does not exist: probe a backbone again",
        path.string(), heads.backbone_file));
  in.backbone_safetensors = read_file_bytes(heads.backbone_file);
  if (const uint32_t crc = storage::crc32_of(in.backbone_safetensors); crc != heads.backbone_crc32)
    throw std::runtime_error(fmt::format(
        "{} was fitted on the backbone file {} with CRC-32 {}, which now has {}: the file "
        "changed since; probe it again",
        path.string(), heads.backbone_file, heads.backbone_crc32, crc));
  return in;
}

PolicyStage load_policy_stage(const JobConfig& config) {
  const ProbeHeadInputs in = read_probe_head_inputs(config);
  return policy_stage_from(config, in.head_bytes, in.head_origin, in.backbone_safetensors);
}

PolicyStage policy_stage_from(const JobConfig& config, const std::string& head_bytes,
                              const std::string& head_origin,
                              const std::string& backbone_safetensors) {
  probe::ProbeHeads heads = probe::parse_probe_heads(head_bytes, head_origin);
  model::FovealBackbone backbone = model::import_backbone(backbone_safetensors);
  for (auto& p : backbone->parameters()) p.set_requires_grad(false);
  const model::BackboneOptions& bo = backbone->options();
  try {
    const std::string what =
        fmt::format("{} on the backbone of {}", head_origin,
                    probe::backbone_origin(heads.checkpoint_step, heads.backbone_file));
    heads.task.check_fits(bo.n_state, bo.width, what);
    if (heads.vit.defined()) heads.vit.check_fits(bo.n_state, bo.width, what + " (ViT mode)");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  model::PolicyOptions po = job_options::policy_options_for(config, bo);
  return PolicyStage{
      std::move(heads.task), std::move(heads.vit), heads.checkpoint_step, std::move(backbone), po,
      heads.backbone_file};
}

model::GazePolicy initial_policy(const JobConfig& config, const PolicyStage& stage) {
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  return model::GazePolicy(stage.policy_options);
}

namespace {

// The best fixed scan path: the same GRPO, budget, seeds and rollouts as the
// policy's (`train`) with a policy that reads only the glimpse index, trained and
// measured into report.fixed_path_*. Once trained, its weights go to
// run.on_fixed_path (a job's learner checkpoints them); `run.fixed_path_weights`,
// when given (a resumed learner's), are loaded instead of trained again; a learner
// killed while it trains retrains it, to the same weights, after the policy's last
// checkpoint. Writes the weights into `weights`. Returns false when a drain
// stopped it.
bool train_fixed_path_baseline(const JobConfig& config, const PolicyStage& stage,
                               RolloutSource& rollouts, int64_t train_size,
                               const PolicyTrainOptions& train, LocalRollouts& val_rollouts,
                               int64_t val_size, const GazeEvalOptions& eval,
                               const PolicyRunOptions& run,
                               const std::function<void(const PolicyEpoch&)>& on_epoch,
                               const PolicyProgress& progress, PolicyReport& report,
                               std::string& weights) {
  model::GazePolicy fixed = initial_policy(config, stage);
  if (!run.fixed_path_weights.empty()) {
    model::load_modules({{"", fixed.get()}}, run.fixed_path_weights);
    fixed->to(stage.backbone->parameters().front().device());
    spdlog::info("policy: the fixed-path baseline's weights from the checkpoint");
  } else {
    PolicyTrainOptions blind = train;
    blind.state_blind = true;
    blind.version_base = uint64_t{1} << 40;  // above any version of the policy's
    fixed->to(stage.backbone->parameters().front().device());
    PolicyProgress fixed_progress;
    fixed_progress.stopping = progress.stopping;
    spdlog::info("policy: the fixed-path baseline, a state-blind policy with the same budget");
    train_policy(
        rollouts, *fixed, train_size, blind,
        [&](const PolicyEpoch& e) {
          report.fixed_path_epochs.push_back(epoch_report(e));
          log_epoch("fixed path", e, blind.steps);
          PolicyEpoch after = e;  // progress keeps counting past the policy's epochs
          after.epoch += train.epochs;
          if (on_epoch) on_epoch(after);
        },
        fixed_progress);
    if (progress.stopping && progress.stopping()) return false;
  }
  GazeEvalOptions fixed_eval = eval;
  fixed_eval.state_blind = true;
  const GazeEvaluation g =
      evaluate_gazes(val_rollouts, fixed.get(), GazeSource::kPolicyMode, val_size, fixed_eval);
  report.fixed_path_accuracy = g.accuracy;
  report.fixed_path_spread = g.gaze_spread;
  report.fixed_path_entropy = g.mixture_entropy;
  spdlog::info("policy: validation top-1 by glimpse, learned fixed path [{}], policy [{}]",
               percents(report.fixed_path_accuracy), percents(report.policy_accuracy));
  fixed->to(torch::kCPU);
  weights = model::save_modules({{"", fixed.get()}});
  if (run.on_fixed_path && run.fixed_path_weights.empty()) run.on_fixed_path(weights);
  return true;
}

// Random gazes, the centre-first scan and the policy's mode on the validation
// images, into the report's *_accuracy, *_spread and policy_entropy.
void measure_gaze_sources(LocalRollouts& val_rollouts, model::GazePolicyImpl& policy,
                          int64_t val_size, const GazeEvalOptions& eval, PolicyReport& report) {
  const GazeEvaluation random =
      evaluate_gazes(val_rollouts, nullptr, GazeSource::kRandom, val_size, eval);
  const GazeEvaluation scan =
      evaluate_gazes(val_rollouts, nullptr, GazeSource::kScan, val_size, eval);
  const GazeEvaluation learned =
      evaluate_gazes(val_rollouts, &policy, GazeSource::kPolicyMode, val_size, eval);
  report.random_accuracy = random.accuracy;
  report.policy_accuracy = learned.accuracy;
  report.random_spread = random.gaze_spread;
  report.scan_accuracy = scan.accuracy;
  report.policy_spread = learned.gaze_spread;
  report.policy_entropy = learned.mixture_entropy;
  spdlog::info(
      "policy: validation top-1 by glimpse, random [{}], fixed scan [{}], policy [{}]; gaze "
      "spread (short sides) random [{}], policy [{}]",
      percents(report.random_accuracy), percents(report.scan_accuracy),
      percents(report.policy_accuracy), fmt::join(report.random_spread, ", "),
      fmt::join(report.policy_spread, ", "));
}

// Writes the policy's weights (moved to the CPU), the fixed path's (when
// trained) and the report into `dir`.
void write_policy_files(const std::filesystem::path& dir, const PolicyStage& stage,
                        model::GazePolicyImpl& policy, const std::string& fixed_path_weights,
                        PolicyReport& report) {
  std::filesystem::create_directories(dir);  // a policy stage may have a work_dir of its own
  if (!fixed_path_weights.empty()) {
    report.fixed_path_file = (dir / kFixedPathFile).string();
    write_file_bytes(report.fixed_path_file, fixed_path_weights);
  }
  report.policy_path = (dir / kPolicyFile).string();
  report.report_path = (dir / "policy.json").string();
  policy.to(torch::kCPU);
  const model::PolicyOptions& po = stage.policy_options;
  const model::Metadata meta{{"format", "saccade.gaze_policy"},
                             {"checkpoint_step", std::to_string(stage.checkpoint_step)},
                             {"in_dim", std::to_string(po.in_dim)},
                             {"n_state", std::to_string(po.n_state)},
                             {"width", std::to_string(po.width)},
                             {"depth", std::to_string(po.depth)},
                             {"heads", std::to_string(po.heads)},
                             {"n_mix", std::to_string(po.n_mix)}};
  write_file_bytes(report.policy_path, model::save_modules({{"", &policy}}, meta));
  write_file_bytes(report.report_path, report_json(report));
}

}  // namespace

PolicyReport train_and_evaluate_policy(const JobConfig& config, PolicyStage& stage,
                                       model::GazePolicyImpl& policy, RolloutSource& rollouts,
                                       const PolicyRunOptions& run,
                                       const std::function<void(const PolicyEpoch&)>& on_epoch,
                                       const PolicyProgress& progress) {
  const std::filesystem::path dir = config.job.work_dir;
  PolicyReport report;
  report.checkpoint_step = stage.checkpoint_step;
  report.backbone_file = stage.backbone_file;
  report.task_head = stage.head.kind();
  const auto train_set =
      data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
  const auto val_set = data::make_dataset(job_options::dataset_spec(config, /*validation=*/true));
  const data::ViewOptions views = job_options::view_options(config);
  const int64_t max_train =
      run.max_train_images > 0 ? run.max_train_images : config.policy.train_images;
  const int64_t max_val = run.max_val_images > 0 ? run.max_val_images : config.policy.val_images;
  const PolicyTrainOptions train = job_options::policy_train_options(config, max_train);
  report.train_images = max_train > 0 ? std::min(max_train, train_set->size()) : train_set->size();
  spdlog::info(
      "policy: GRPO on {} images of {} ({} traces x {} glimpses per image)", report.train_images,
      probe::backbone_origin(stage.checkpoint_step, stage.backbone_file), train.group, train.steps);
  policy.to(stage.backbone->parameters().front().device());
  LocalRollouts val_rollouts(*stage.backbone, stage.head, *val_set, views);
  // The final evaluation's; the training curve's points take its first curve_images.
  GazeEvalOptions eval =
      job_options::gaze_eval_options(config, job_options::GazeEvalFor::kPolicyStage);
  eval.max_images = max_val;

  // The training curve: the policy's mode on the first curve_images validation
  // images every curve_every_batches rollout batches and after the last.
  PolicyProgress tracked = progress;
  const int64_t total_batches =
      train.epochs * ((report.train_images + train.batch_size - 1) / train.batch_size);
  double reward_sum = 0;
  int64_t reward_batches = 0;
  tracked.on_batch = [&](int64_t done, double reward) {
    if (progress.on_batch) progress.on_batch(done, reward);
    reward_sum += reward;
    ++reward_batches;
    const int64_t every = config.policy.curve_every_batches;
    if (every <= 0 || (done % every != 0 && done != total_batches)) return;
    GazeEvalOptions point = eval;
    point.max_images = config.policy.curve_images;
    const GazeEvaluation g =
        evaluate_gazes(val_rollouts, &policy, GazeSource::kPolicyMode, val_set->size(), point);
    report.val_curve.push_back(
        {done, reward_sum / static_cast<double>(reward_batches), g.accuracy, g.gaze_spread});
    spdlog::info(
        "policy after {} of {} rollout batches: reward {:.4f}, validation top-1 by "
        "glimpse [{}] ({} images)",
        done, total_batches, report.val_curve.back().reward, percents(g.accuracy),
        std::min(point.max_images, val_set->size()));
    reward_sum = 0;
    reward_batches = 0;
  };
  train_policy(
      rollouts, policy, train_set->size(), train,
      [&](const PolicyEpoch& e) {
        report.epochs.push_back(epoch_report(e));
        log_epoch("policy", e, train.steps);
        if (on_epoch) on_epoch(e);
      },
      tracked);
  if (progress.stopping && progress.stopping()) {
    report.stopped = true;
    return report;
  }

  report.sees_state = !train.state_blind;
  report.reward = config.policy.reward;
  report.val_images = max_val > 0 ? std::min(max_val, val_set->size()) : val_set->size();
  const int64_t val_size = val_set->size();
  measure_gaze_sources(val_rollouts, policy, val_size, eval, report);

  std::string fixed_path_weights;
  if (config.policy.fixed_path_baseline && !train.state_blind &&
      !train_fixed_path_baseline(config, stage, rollouts, train_set->size(), train, val_rollouts,
                                 val_size, eval, run, on_epoch, progress, report,
                                 fixed_path_weights)) {
    report.stopped = true;
    return report;
  }

  write_policy_files(dir, stage, policy, fixed_path_weights, report);
  return report;
}

PolicyReport run_policy(const JobConfig& config, const PolicyRunOptions& run) {
  at::set_num_threads(job_options::resolve_threads(config.ssl.threads));
  PolicyStage stage = load_policy_stage(config);
  model::GazePolicy policy = initial_policy(config, stage);
  const auto train_set =
      data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
  LocalRollouts local(*stage.backbone, stage.head, *train_set, job_options::view_options(config));
  return train_and_evaluate_policy(config, stage, *policy, local, run);
}

}  // namespace saccade::policy
