// The backbone the probe, policy and eval stages read: the teacher of a
// committed pretraining checkpoint (DINO evaluates the teacher), or the
// random-init baseline, as model::export_backbone's safetensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/config.h"

namespace saccade::teacher {

// The teacher backbone of a committed checkpoint of the job (DINO evaluates
// the teacher), as model::export_backbone's safetensors. The checkpoints are
// job.work_dir/coordinator.db (a distributed job) if it exists, else
// checkpoints.db (`saccade pretrain`). Throws std::runtime_error naming the
// folder or database when there is no such checkpoint.
struct TeacherBackbone {
  int64_t step = -1;        // the checkpoint's
  std::string db;           // the database it came from
  std::string safetensors;  // the backbone
};
// The teacher's backbone out of a checkpoint's "teacher" blob (only the
// backbone is read and built: not the heads, student or optimiser).
std::string teacher_backbone_from(const JobConfig& config, std::string_view teacher_blob);
// Looks in `dir` (default job.work_dir), opening the databases read-only.
TeacherBackbone load_teacher_backbone(const JobConfig& config, int64_t step = -1,  // -1: newest
                                      const std::string& dir = "");

// The teacher backbone before any step of this job's pretraining (job.seed):
// the random-init baseline, as model::export_backbone's safetensors.
std::string initial_backbone(const JobConfig& config);

}  // namespace saccade::teacher
