// The coordinator's durable state: a small RocksDB key-value store under
// job.work_dir. Every update is one atomic WriteBatch, so a coordinator
// killed at any moment restarts from a consistent state.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rocksdb {
class DB;
}

namespace saccade::control {

class StateStore {
 public:
  // Opens (creating if needed) the database in `dir`. Throws
  // std::runtime_error naming the folder and RocksDB's reason.
  explicit StateStore(const std::filesystem::path& dir);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  std::optional<std::string> get(const std::string& key) const;
  // Every key starting with `prefix`, in key order.
  std::map<std::string, std::string> scan(const std::string& prefix) const;
  // Writes all of `entries` atomically; `sync` also waits for the disk
  // (checkpoint commits), otherwise the write survives a process kill only.
  void put(const std::map<std::string, std::string>& entries, bool sync = false);

 private:
  std::unique_ptr<rocksdb::DB> db_;  // owned
  std::string dir_;
};

}  // namespace saccade::control
