#include "storage/rollout_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <stdexcept>

namespace saccade::storage {
namespace {

void check(const rocksdb::Status& status, const std::string& what) {
  if (!status.ok()) throw std::runtime_error(what + ": " + status.ToString());
}

// Big-endian, so RocksDB's byte order is (version, image) order.
void append_u64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

uint64_t read_u64(const rocksdb::Slice& s, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string version_prefix(uint64_t version) {
  std::string key;
  append_u64(key, version);
  return key;
}

std::string group_key(uint64_t version, uint64_t image) {
  std::string key = version_prefix(version);
  append_u64(key, image);
  return key;
}

}  // namespace

struct RolloutStore::Impl {
  std::string path;
  int64_t keep_versions = 0;
  std::unique_ptr<rocksdb::DB> db;
};

std::unique_ptr<RolloutStore> RolloutStore::open(const std::string& path, int64_t keep_versions) {
  if (path.empty()) throw std::invalid_argument("rollout store path must not be empty");
  if (keep_versions < 0)
    throw std::invalid_argument("rollout store keep_versions must be >= 0, got " +
                                std::to_string(keep_versions));
  rocksdb::Options options;
  options.create_if_missing = true;
  options.enable_blob_files = true;
  options.min_blob_size = 4096;
  options.enable_blob_garbage_collection = true;
  options.blob_garbage_collection_age_cutoff = 1.0;
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(options, path, &raw), "cannot open rollout store at " + path);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->keep_versions = keep_versions;
  impl->db.reset(raw);
  return std::unique_ptr<RolloutStore>(new RolloutStore(std::move(impl)));
}

RolloutStore::RolloutStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RolloutStore::~RolloutStore() = default;

const std::string& RolloutStore::path() const {
  return impl_->path;
}

void RolloutStore::put(uint64_t version, const Groups& groups) {
  rocksdb::WriteBatch batch;
  for (const auto& [image, bytes] : groups)
    check(batch.Put(group_key(version, image), bytes), "rollout store batch");
  const std::vector<uint64_t> stored = versions();
  if (impl_->keep_versions > 0) {
    // The versions to keep: the newest keep_versions of stored + this one.
    std::vector<uint64_t> all = stored;
    if (all.empty() || all.back() < version) all.push_back(version);
    const size_t keep = static_cast<size_t>(impl_->keep_versions);
    if (all.size() > keep) {
      const uint64_t oldest_kept = all[all.size() - keep];
      if (oldest_kept > all.front())
        check(batch.DeleteRange(version_prefix(all.front()), version_prefix(oldest_kept)),
              "rollout store batch");
    }
  }
  check(impl_->db->Write(rocksdb::WriteOptions(), &batch),
        "rollout store " + impl_->path + ": writing version " + std::to_string(version));
}

std::vector<uint64_t> RolloutStore::versions() const {
  std::vector<uint64_t> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid();) {
    const uint64_t version = read_u64(it->key(), 0);
    out.push_back(version);
    if (version == UINT64_MAX) break;
    it->Seek(version_prefix(version + 1));  // skip the version's images
  }
  check(it->status(), "rollout store " + impl_->path + ": listing versions");
  return out;
}

RolloutStore::Groups RolloutStore::read(uint64_t version) const {
  Groups out;
  const std::string prefix = version_prefix(version);
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
    out.emplace_back(read_u64(it->key(), 8), it->value().ToString());
  check(it->status(),
        "rollout store " + impl_->path + ": reading version " + std::to_string(version));
  return out;
}

}  // namespace saccade::storage
