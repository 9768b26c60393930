// The coordinator's durable state, in ONE RocksDB under job.work_dir
// (coordinator.db): the job's key/value state (family "state") and the
// checkpoints learner 0 streams in (storage::CheckpointStore). Every update
// is one atomic WriteBatch, so a coordinator killed at any moment restarts
// from a consistent state, and a checkpoint is either whole or invisible.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "storage/checkpoint_store.h"

namespace saccade::control {

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

  storage::CheckpointStore& checkpoints() { return *db_; }
  const storage::CheckpointStore& checkpoints() const { return *db_; }

 private:
  std::unique_ptr<storage::CheckpointStore> db_;  // owned
};

}  // namespace saccade::control
