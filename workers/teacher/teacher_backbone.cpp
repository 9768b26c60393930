#include "workers/teacher/teacher_backbone.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <stdexcept>
#include <vector>

#include "model/backbone.h"
#include "model/weights.h"
#include "storage/checkpoint_store.h"
#include "workers/job_options/model_options.h"

namespace saccade::teacher {

std::string initial_backbone(const JobConfig& config) {
  // As SslTrainer builds it: seeded by job.seed, the backbone before the head.
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  model::FovealBackbone backbone(job_options::backbone_options(config));
  return model::export_backbone(*backbone);
}

std::string teacher_backbone_from(const JobConfig& config, std::string_view teacher_blob) {
  return model::extract_backbone(teacher_blob, "backbone", job_options::backbone_options(config));
}

TeacherBackbone load_teacher_backbone(const JobConfig& config, int64_t step,
                                      const std::string& dir_override) {
  const std::filesystem::path dir = dir_override.empty() ? config.job.work_dir : dir_override;
  storage::StoreOptions read_only;
  read_only.read_only = true;  // a coordinator or other readers may hold it
  std::vector<std::string> tried;
  for (const char* name : {"coordinator.db", "checkpoints.db"}) {
    if (!std::filesystem::exists(dir / name)) continue;
    const std::string db = (dir / name).string();
    tried.push_back(db);
    auto store = storage::CheckpointStore::open(db, read_only);
    const auto info = step < 0 ? store->latest() : store->info(step);
    if (!info) continue;  // e.g. a later job's coordinator.db beside pretrain's checkpoints.db
    TeacherBackbone out;
    out.db = db;
    out.step = info->step;
    out.safetensors = teacher_backbone_from(config, store->read(info->step, "teacher"));
    return out;
  }
  if (tried.empty())
    throw std::runtime_error(fmt::format(
        "no checkpoints in {} (coordinator.db or checkpoints.db): pretrain first", dir.string()));
  throw std::runtime_error(fmt::format("{} {} no committed checkpoint{}", fmt::join(tried, " and "),
                                       tried.size() > 1 ? "have" : "has",
                                       step < 0 ? "" : fmt::format(" {}", step)));
}

}  // namespace saccade::teacher
