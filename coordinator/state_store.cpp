#include "coordinator/state_store.h"

namespace saccade::coordinator {

namespace {
constexpr const char* kFamily = "state";
}

StateStore::StateStore(const std::filesystem::path& dir) : path_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir.parent_path().empty() ? dir : dir.parent_path(), ec);
  db_ = storage::CheckpointStore::open(dir.string());
}

std::filesystem::path StateStore::stage_store_path(const std::filesystem::path& db,
                                                   const std::string& stage) {
  if (stage == "pretrain") return db;
  return db.parent_path() / (stage + "-checkpoints.db");
}

storage::CheckpointStore& StateStore::checkpoints(const std::string& stage) {
  if (stage == "pretrain") return *db_;
  auto& store = stages_[stage];
  if (!store) store = storage::CheckpointStore::open(stage_store_path(path_, stage).string());
  return *store;
}

std::optional<std::string> StateStore::get(const std::string& key) const {
  return db_->get(kFamily, key);
}

std::map<std::string, std::string> StateStore::scan(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : db_->scan(kFamily, prefix)) out.emplace(std::move(k), std::move(v));
  return out;
}

void StateStore::put(const std::map<std::string, std::string>& entries, bool sync) {
  if (entries.empty()) return;
  std::vector<std::pair<std::string, std::optional<std::string>>> ops;
  ops.reserve(entries.size());
  for (const auto& [k, v] : entries) ops.emplace_back(k, v);
  db_->write(kFamily, ops, sync);
}

}  // namespace saccade::coordinator
