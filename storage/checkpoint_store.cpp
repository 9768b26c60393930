#include "storage/checkpoint_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "storage/manifest.h"

namespace saccade::storage {
namespace {

// Keys of the "checkpoints" family; the step is fixed-width so keys sort by step.
//   b/<step>/<name>  blob bytes
//   m/<step>         manifest
//   c/<step>         committed marker (the manifest's CRC-32, 4 bytes LE)
std::string step_digits(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020lld", static_cast<long long>(step));
  return buf;
}
std::string blob_prefix(int64_t step) {
  return "b/" + step_digits(step) + "/";
}
std::string blob_key(int64_t step, const std::string& name) {
  return blob_prefix(step) + name;
}
std::string manifest_key(int64_t step) {
  return "m/" + step_digits(step);
}
std::string marker_key(int64_t step) {
  return "c/" + step_digits(step);
}
// One past every blob key of `step`: '0' follows '/'.
std::string blob_prefix_end(int64_t step) {
  return "b/" + step_digits(step) + "0";
}

int64_t parse_step(std::string_view digits) {
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') throw std::runtime_error("checkpoint store: bad step key");
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string marker_value(const std::string& manifest) {
  const uint32_t crc = crc32_of(manifest);
  std::string v(4, '\0');
  for (int i = 0; i < 4; ++i) v[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return v;
}

void check(const rocksdb::Status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.ToString());
}

void check_step(int64_t step) {
  if (step < 0)
    throw std::invalid_argument("checkpoint step must be >= 0, got " + std::to_string(step));
}

}  // namespace

struct CheckpointStore::Impl {
  std::string path;
  StoreOptions options;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // default, checkpoints, state, metrics
  rocksdb::ColumnFamilyHandle* checkpoints = nullptr;
  rocksdb::ColumnFamilyHandle* state = nullptr;
  rocksdb::ColumnFamilyHandle* metrics = nullptr;

  ~Impl() {
    if (!db) return;
    for (rocksdb::ColumnFamilyHandle* h : handles) db->DestroyColumnFamilyHandle(h);
    db->Close();
  }

  rocksdb::ColumnFamilyHandle* family(std::string_view name) const {
    if (name == "state") return state;
    if (name == "metrics") return metrics;
    throw std::invalid_argument("store family must be \"state\" or \"metrics\", got \"" +
                                std::string(name) + "\"");
  }

  std::optional<std::string> get(rocksdb::ColumnFamilyHandle* cf, const std::string& key) const {
    std::string value;
    const rocksdb::Status s = db->Get(rocksdb::ReadOptions(), cf, key, &value);
    if (s.IsNotFound()) return std::nullopt;
    check(s, "checkpoint store " + path + ": reading key '" + key + "'");
    return value;
  }

  // The manifest of `step` if its committed marker exists and matches it.
  std::optional<CheckpointInfo> committed(int64_t step) const {
    const std::optional<std::string> marker = get(checkpoints, marker_key(step));
    if (!marker) return std::nullopt;
    const std::string what = "checkpoint " + std::to_string(step);
    const std::optional<std::string> manifest = get(checkpoints, manifest_key(step));
    if (!manifest) throw std::runtime_error(what + ": committed marker without a manifest");
    if (marker_value(*manifest) != *marker)
      throw std::runtime_error(what + ": manifest does not match its committed marker");
    CheckpointInfo info = decode_manifest(*manifest, what);
    if (info.step != step)
      throw std::runtime_error(what + ": manifest names step " + std::to_string(info.step));
    return info;
  }

  std::vector<int64_t> steps_with_prefix(const std::string& prefix) const {
    std::vector<int64_t> steps;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), checkpoints));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
      steps.push_back(parse_step(it->key().ToStringView().substr(prefix.size())));
    check(it->status(), "checkpoint store " + path + ": scanning '" + prefix + "'");
    return steps;
  }

  // Puts blobs + manifest of `step` into `batch`, replacing whatever was there.
  std::string stage(rocksdb::WriteBatch& batch, int64_t step,
                    const std::map<std::string, std::string>& blobs,
                    const std::map<std::string, std::string>& meta) const {
    CheckpointInfo info;
    info.step = step;
    info.meta = meta;
    check(batch.DeleteRange(checkpoints, blob_prefix(step), blob_prefix_end(step)), "batch");
    for (const auto& [name, bytes] : blobs) {
      if (name.empty()) throw std::invalid_argument("checkpoint blob name must not be empty");
      info.blobs.push_back({name, bytes.size(), crc32_of(bytes)});
      check(batch.Put(checkpoints, blob_key(step, name), bytes), "batch");
    }
    std::string manifest = encode_manifest(info);
    check(batch.Put(checkpoints, manifest_key(step), manifest), "batch");
    return manifest;
  }

  void erase_step(rocksdb::WriteBatch& batch, int64_t step) const {
    check(batch.DeleteRange(checkpoints, blob_prefix(step), blob_prefix_end(step)), "batch");
    check(batch.Delete(checkpoints, manifest_key(step)), "batch");
    check(batch.Delete(checkpoints, marker_key(step)), "batch");
  }

  void apply(rocksdb::WriteBatch& batch, bool sync, const std::string& what) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    check(db->Write(wo, &batch), "checkpoint store " + path + ": " + what);
  }
};

std::unique_ptr<CheckpointStore> CheckpointStore::open(const std::string& path,
                                                       const StoreOptions& options) {
  if (path.empty()) throw std::invalid_argument("checkpoint store path must not be empty");
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;

  rocksdb::ColumnFamilyOptions blob_cf;
  blob_cf.enable_blob_files = true;
  blob_cf.min_blob_size = options.min_blob_size;
  blob_cf.blob_file_size = options.blob_file_size;
  blob_cf.enable_blob_garbage_collection = true;  // compaction rewrites and drops dead blobs
  blob_cf.blob_garbage_collection_age_cutoff = 1.0;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"checkpoints", blob_cf},
      {"state", rocksdb::ColumnFamilyOptions()},
      {"metrics", rocksdb::ColumnFamilyOptions()}};

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->options = options;
  rocksdb::DB* raw = nullptr;
  if (options.read_only) {
    check(rocksdb::DB::OpenForReadOnly(db_options, path, families, &impl->handles, &raw),
          "cannot open checkpoint store at " + path + " to read");
  } else {
    check(rocksdb::DB::Open(db_options, path, families, &impl->handles, &raw),
          "cannot open checkpoint store at " + path);
  }
  impl->db.reset(raw);
  impl->checkpoints = impl->handles[1];
  impl->state = impl->handles[2];
  impl->metrics = impl->handles[3];
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(std::move(impl)));
}

CheckpointStore::CheckpointStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointStore::~CheckpointStore() = default;

const std::string& CheckpointStore::path() const {
  return impl_->path;
}

void CheckpointStore::commit(int64_t step, const std::map<std::string, std::string>& blobs,
                             const std::map<std::string, std::string>& meta) {
  check_step(step);
  rocksdb::WriteBatch batch;
  const std::string manifest = impl_->stage(batch, step, blobs, meta);
  check(batch.Put(impl_->checkpoints, marker_key(step), marker_value(manifest)), "batch");
  impl_->apply(batch, impl_->options.sync_commits, "committing step " + std::to_string(step));
}

std::optional<CheckpointInfo> CheckpointStore::info(int64_t step) const {
  check_step(step);
  return impl_->committed(step);
}

std::vector<CheckpointInfo> CheckpointStore::list() const {
  std::vector<CheckpointInfo> out;
  for (int64_t step : impl_->steps_with_prefix("c/")) {
    if (std::optional<CheckpointInfo> info = impl_->committed(step)) out.push_back(*info);
  }
  return out;
}

std::optional<CheckpointInfo> CheckpointStore::latest() const {
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->checkpoints));
  it->SeekForPrev("c/~");  // '~' sorts after every digit: the last marker
  if (it->Valid() && it->key().starts_with("c/"))
    return impl_->committed(parse_step(it->key().ToStringView().substr(2)));
  check(it->status(), "checkpoint store " + impl_->path + ": finding the latest checkpoint");
  return std::nullopt;
}

std::string CheckpointStore::read(int64_t step, const std::string& name) const {
  check_step(step);
  const std::optional<CheckpointInfo> info = impl_->committed(step);
  if (!info) throw std::out_of_range("no committed checkpoint at step " + std::to_string(step));
  const auto blob = std::find_if(info->blobs.begin(), info->blobs.end(),
                                 [&](const BlobInfo& b) { return b.name == name; });
  if (blob == info->blobs.end())
    throw std::out_of_range("checkpoint " + std::to_string(step) + " has no blob '" + name + "'");
  const std::string what = "checkpoint " + std::to_string(step) + " blob '" + name + "'";
  std::string bytes;
  const rocksdb::Status s =
      impl_->db->Get(rocksdb::ReadOptions(), impl_->checkpoints, blob_key(step, name), &bytes);
  if (s.IsNotFound()) throw std::runtime_error(what + ": listed in the manifest but missing");
  check(s, what);
  if (bytes.size() != blob->size)
    throw std::runtime_error(what + ": size " + std::to_string(bytes.size()) +
                             " differs from the manifest's " + std::to_string(blob->size));
  if (crc32_of(bytes) != blob->crc32)
    throw std::runtime_error(what + ": CRC-32 mismatch (stored bytes are corrupt)");
  return bytes;
}

std::map<std::string, std::string> CheckpointStore::read_all(int64_t step) const {
  check_step(step);
  const std::optional<CheckpointInfo> info = impl_->committed(step);
  if (!info) throw std::out_of_range("no committed checkpoint at step " + std::to_string(step));
  std::map<std::string, std::string> out;
  for (const BlobInfo& b : info->blobs) out[b.name] = read(step, b.name);
  return out;
}

int64_t CheckpointStore::prune(int64_t keep_last_n) {
  if (keep_last_n < 1)
    throw std::invalid_argument("prune keep_last_n must be >= 1, got " +
                                std::to_string(keep_last_n));
  const std::vector<int64_t> committed = impl_->steps_with_prefix("c/");
  const int64_t n_drop = std::max<int64_t>(0, static_cast<int64_t>(committed.size()) - keep_last_n);
  rocksdb::WriteBatch batch;
  for (int64_t i = 0; i < n_drop; ++i) impl_->erase_step(batch, committed[i]);
  // Uncommitted leftovers: a manifest without a marker (only test hooks make them).
  for (int64_t step : impl_->steps_with_prefix("m/")) {
    if (!std::binary_search(committed.begin(), committed.end(), step))
      impl_->erase_step(batch, step);
  }
  if (batch.Count() == 0) return 0;
  impl_->apply(batch, true, "pruning");
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  check(impl_->db->CompactRange(compact, impl_->checkpoints, nullptr, nullptr),
        "checkpoint store " + impl_->path + ": compacting after prune");
  return n_drop;
}

void CheckpointStore::put(std::string_view family, const std::string& key, const std::string& value,
                          bool sync) {
  write(family, {{key, value}}, sync);
}

std::optional<std::string> CheckpointStore::get(std::string_view family,
                                                const std::string& key) const {
  return impl_->get(impl_->family(family), key);
}

void CheckpointStore::erase(std::string_view family, const std::string& key, bool sync) {
  write(family, {{key, std::nullopt}}, sync);
}

void CheckpointStore::write(
    std::string_view family,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& ops, bool sync) {
  rocksdb::ColumnFamilyHandle* cf = impl_->family(family);
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : ops) {
    check(value ? batch.Put(cf, key, *value) : batch.Delete(cf, key), "batch");
  }
  impl_->apply(batch, sync, "writing to family " + std::string(family));
}

std::vector<std::pair<std::string, std::string>> CheckpointStore::scan(
    std::string_view family, const std::string& prefix) const {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->family(family)));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
    out.emplace_back(it->key().ToString(), it->value().ToString());
  check(it->status(), "checkpoint store " + impl_->path + ": scanning " + std::string(family));
  return out;
}

void CheckpointStore::write_uncommitted_for_testing(
    int64_t step, const std::map<std::string, std::string>& blobs) {
  check_step(step);
  rocksdb::WriteBatch batch;
  impl_->stage(batch, step, blobs, {});
  check(batch.Delete(impl_->checkpoints, marker_key(step)), "batch");
  impl_->apply(batch, true, "test hook");
}

void CheckpointStore::overwrite_blob_for_testing(int64_t step, const std::string& name,
                                                 const std::string& bytes) {
  check_step(step);
  rocksdb::WriteBatch batch;
  check(batch.Put(impl_->checkpoints, blob_key(step, name), bytes), "batch");
  impl_->apply(batch, true, "test hook");
}

}  // namespace saccade::storage
