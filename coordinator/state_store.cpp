#include "coordinator/state_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <stdexcept>

namespace saccade::control {

StateStore::StateStore(const std::filesystem::path& dir) : dir_(dir.string()) {
  std::error_code ec;
  std::filesystem::create_directories(dir.parent_path().empty() ? dir : dir.parent_path(), ec);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, dir_, &db);
  if (!s.ok())
    throw std::runtime_error("coordinator database " + dir_ + ": cannot open: " + s.ToString());
  db_.reset(db);
}

StateStore::~StateStore() = default;

std::optional<std::string> StateStore::get(const std::string& key) const {
  std::string value;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) throw std::runtime_error("coordinator database " + dir_ + ": read: " + s.ToString());
  return value;
}

std::map<std::string, std::string> StateStore::scan(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
    out.emplace(it->key().ToString(), it->value().ToString());
  if (!it->status().ok())
    throw std::runtime_error("coordinator database " + dir_ + ": scan: " + it->status().ToString());
  return out;
}

void StateStore::put(const std::map<std::string, std::string>& entries, bool sync) {
  if (entries.empty()) return;
  rocksdb::WriteBatch batch;
  for (const auto& [k, v] : entries) batch.Put(k, v);
  rocksdb::WriteOptions options;
  options.sync = sync;
  const rocksdb::Status s = db_->Write(options, &batch);
  if (!s.ok())
    throw std::runtime_error("coordinator database " + dir_ + ": write: " + s.ToString());
}

}  // namespace saccade::control
