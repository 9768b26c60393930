// The coordinator's durable state, in ONE RocksDB under job.work_dir
// (coordinator.db): the job's key/value state (family "state") and the
// pretrain stage's checkpoints learner 0 streams in (storage::CheckpointStore).
// Every update is one atomic WriteBatch, so a coordinator killed at any moment
// restarts from a consistent state, and a checkpoint is either whole or
// invisible. The later stages' checkpoints live in stores of their own beside
// it (<stage>-checkpoints.db), so that their steps never shadow pretraining's.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "storage/checkpoint_store.h"

namespace saccade::coordinator {

class StateStore {
 public:
  // Opens (creating if needed) the database in `dir`. Throws
  // std::runtime_error naming the folder and RocksDB's reason.
  explicit StateStore(const std::filesystem::path& dir);

  std::optional<std::string> get(const std::string& key) const;
  // Every key starting with `prefix`, in key order.
  std::map<std::string, std::string> scan(const std::string& prefix) const;
  // Writes all of `entries` atomically; `sync` also waits for the disk,
  // otherwise the write survives a process kill only.
  void put(const std::map<std::string, std::string>& entries, bool sync = false);

  // The checkpoints of stage `stage`, opened (created) on first use. Throws
  // std::runtime_error naming the store when RocksDB cannot open it.
  storage::CheckpointStore& checkpoints(const std::string& stage);
  // Where stage `stage`'s checkpoints of the database at `db` live.
  static std::filesystem::path stage_store_path(const std::filesystem::path& db,
                                                const std::string& stage);

 private:
  std::filesystem::path path_;
  std::unique_ptr<storage::CheckpointStore> db_;  // owned; pretrain's checkpoints too
  std::map<std::string, std::unique_ptr<storage::CheckpointStore>> stages_;  // owned, the others
};

}  // namespace saccade::coordinator
