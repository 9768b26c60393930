#include "workers/probe/probe_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "common/file_bytes.h"
#include "dataloader/dataset_factory.h"
#include "model/weights.h"
#include "workers/data/data_options.h"
#include "workers/pretrain/job_options.h"
#include "workers/pretrain/pretrain_job.h"
#include "workers/probe/probe.h"

namespace saccade::workers {
namespace {

std::string report_json(const ProbeReport& r) {
  std::string sweep, steps;
  for (const auto& [lr, accuracy] : r.sweep)
    sweep += fmt::format("{}{{\"lr\": {}, \"accuracy\": {:.6f}}}", sweep.empty() ? "" : ", ", lr,
                         accuracy);
  for (double a : r.step_accuracy) steps += fmt::format("{}{:.6f}", steps.empty() ? "" : ", ", a);
  return fmt::format(
      "{{\"checkpoint_step\": {}, \"train_images\": {}, \"val_images\": {}, "
      "\"skipped_corrupt\": {}, \"lr\": {}, \"sweep\": [{}], \"vit_accuracy\": {:.6f}, "
      "\"step_accuracy\": [{}]}}\n",
      r.checkpoint_step, r.train_images, r.val_images, r.skipped_corrupt, r.lr, sweep,
      r.vit_accuracy, steps);
}

}  // namespace

ProbeReport run_probe(const JobConfig& config, const ProbeRunOptions& run) {
  if (config.probe.head != "linear")
    throw std::runtime_error(
        fmt::format("probe.head = \"{}\": only the linear head is implemented", config.probe.head));
  at::set_num_threads(resolve_threads(config.ssl.threads));
  ProbeReport report;
  const TeacherBackbone teacher = load_teacher_backbone(config, run.step);
  report.checkpoint_step = teacher.step;
  report.checkpoint_db = teacher.db;
  model::FovealBackbone backbone = model::import_backbone(teacher.safetensors);

  const auto train_set = data::make_dataset(dataset_spec(config, /*validation=*/false));
  const auto val_set = data::make_dataset(dataset_spec(config, /*validation=*/true));
  if (train_set->num_classes() < 2)
    throw std::runtime_error("the probe needs labels: the training split has no classes");
  FeatureOptions features;
  features.glimpses = static_cast<int>(config.probe.glimpses);
  features.threads = static_cast<int>(config.data.loader_threads);
  features.seed = static_cast<uint64_t>(config.job.seed);
  features.batch_size = config.probe.batch_size;
  const data::ViewOptions views = view_options(config);
  const auto t0 = std::chrono::steady_clock::now();
  features.max_images = run.max_train_images;
  const ProbeFeatures train = extract_probe_features(*backbone, *train_set, views, features);
  features.max_images = run.max_val_images;
  features.seed ^= 0x7a1du;  // validation gazes are not the training ones
  const ProbeFeatures val = extract_probe_features(*backbone, *val_set, views, features);
  report.feature_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.train_images = train.labels.size(0);
  report.val_images = val.labels.size(0);
  report.skipped_corrupt = train.skipped_corrupt + val.skipped_corrupt;
  spdlog::info("probe: features of {} + {} images in {:.1f} s ({} corrupt skipped)",
               report.train_images, report.val_images, report.feature_seconds,
               report.skipped_corrupt);

  LinearProbeOptions probe;
  probe.epochs = config.probe.epochs;
  probe.batch_size = config.probe.batch_size;
  probe.lrs = config.probe.lrs;
  probe.momentum = config.probe.momentum;
  probe.weight_decay = config.probe.weight_decay;
  probe.seed = static_cast<uint64_t>(config.job.seed);
  const ProbeResult result = train_linear_probe(train, val, train_set->num_classes(), probe);
  report.lr = result.lr;
  report.sweep = result.sweep;
  report.vit_accuracy = result.vit_accuracy;
  report.step_accuracy = result.step_accuracy;

  const std::filesystem::path dir = config.job.work_dir;
  report.head_path = (dir / "probe_head.safetensors").string();
  report.report_path = (dir / "probe.json").string();
  const model::Metadata meta{{"format", "saccade.linear_probe"},
                             {"checkpoint_step", std::to_string(report.checkpoint_step)},
                             {"lr", fmt::format("{}", report.lr)},
                             {"input", "first state token"}};
  write_file_bytes(report.head_path,
                   model::serialize_safetensors({{"weight", model::to_raw_tensor(result.weight)},
                                                 {"bias", model::to_raw_tensor(result.bias)}},
                                                meta));
  write_file_bytes(report.report_path, report_json(report));
  return report;
}

}  // namespace saccade::workers
