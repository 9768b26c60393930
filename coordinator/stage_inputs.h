// What a stage reads from the stages before it (the policy stage: the probe's
// task head and the checkpoint it names), served to the stage's actors over
// the wire so that no actor opens a database or file on the coordinator's
// node. Checkpoints come from this job's pretrain stage, else from the input
// folder, policy.input_dir (job.work_dir when empty): its coordinator.db and
// checkpoints.db (`saccade pretrain`), opened read-only on first use. Named
// outputs (the probe's head) come from the latest checkpoint of this job's
// earlier stage that holds one, else from a file of the input folder.
// Internal to coordinator/; single-threaded (the loop's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "control/checkpoint_transfer.h"
#include "storage/checkpoint_store.h"

namespace saccade::coordinator {

// The blobs `names` (every blob when empty) of committed checkpoint `step` of
// `store`. Throws std::runtime_error naming the step and a missing blob.
control::Blobs read_blobs(const storage::CheckpointStore& store, int64_t step,
                          const std::vector<std::string>& names);

class StageInputs {
 public:
  // `own`: the coordinator's store (borrowed, outlives this), at `own_path`.
  StageInputs(const JobConfig& config, const storage::CheckpointStore& own,
              const std::filesystem::path& own_path);
  StageInputs(const StageInputs&) = delete;
  StageInputs& operator=(const StageInputs&) = delete;

  // The checkpoint stores of this job's stages before the running one, other
  // than pretrain's (borrowed, they outlive this), in stage order.
  void set_stage_outputs(
      std::vector<std::pair<std::string, const storage::CheckpointStore*>> outputs) {
    outputs_ = std::move(outputs);
  }

  // Checkpoint `step` (-1: the newest) of the first input store that has it
  // with every blob of `names` (empty: all blobs), only those blobs. A store
  // whose checkpoint lacks one is passed over. Throws std::runtime_error
  // naming the folder, the stores tried and what is missing.
  std::pair<int64_t, control::Blobs> checkpoint(int64_t step,
                                                const std::vector<std::string>& names);
  // Outputs by plain name (no '/', not "." or ".."): an earlier stage's, else
  // the input folder's file, each at most `max_bytes`. Throws
  // std::runtime_error naming the file and the reason.
  control::Blobs files(const std::vector<std::string>& names, uint64_t max_bytes) const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  // Blob `name` of the latest checkpoint of the newest earlier stage holding it.
  std::optional<std::string> stage_output(const std::string& name) const;

  std::filesystem::path dir_;
  std::vector<std::pair<std::string, const storage::CheckpointStore*>> outputs_;  // not owned
  const storage::CheckpointStore& own_;                                           // not owned
  std::filesystem::path own_path_;
  std::map<std::string, std::unique_ptr<storage::CheckpointStore>> opened_;  // read-only, by path
};

}  // namespace saccade::coordinator
