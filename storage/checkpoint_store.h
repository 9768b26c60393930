// A RocksDB store for checkpoints and small job state. Bytes in, bytes out: no
// torch, so the coordinator and tools can use it too.
//
// A checkpoint is a set of named byte blobs plus string metadata, committed in
// ONE synced WriteBatch together with its manifest (names, sizes, CRC-32 of
// every blob, metadata) and a committed marker. RocksDB applies a batch whole
// or not at all, so after a crash a checkpoint is either whole or invisible:
// latest()/list() show only steps whose marker exists (RocksDB's WriteBatch,
// docs/references.md).
// Blobs live in integrated BlobDB files (enable_blob_files) so multi-MB values
// do not churn through LSM compactions. Every read verifies the blob's CRC-32
// against the manifest; a mismatch throws naming the step and the blob.
//
// Column families: "checkpoints" (owned by the checkpoint API) and "state",
// "metrics" (the generic key/value API, e.g. the coordinator's job state).
// Thread-safe: any number of threads may call any method concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace saccade::storage {

// zlib's CRC-32 of `bytes` (any size), as kept in manifests and carried by checkpoint chunks.
uint32_t crc32_of(std::string_view bytes);

struct BlobInfo {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;  // zlib CRC-32 of the bytes
};

struct CheckpointInfo {
  int64_t step = 0;
  std::vector<BlobInfo> blobs;  // sorted by name
  std::map<std::string, std::string> meta;
};

struct StoreOptions {
  bool sync_commits = true;       // fsync the WAL on commit (a checkpoint survives power loss)
  uint64_t min_blob_size = 4096;  // values at least this large go to blob files
  uint64_t blob_file_size = 256ull << 20;
  // Opens without RocksDB's lock, so any number of readers (every rollout
  // actor of a node) may read a store while one writer holds it; writes throw.
  bool read_only = false;
};

class CheckpointStore {
 public:
  // Opens (creating if missing) the store at `path`. Throws std::runtime_error
  // naming the path and RocksDB's reason when it cannot.
  static std::unique_ptr<CheckpointStore> open(const std::string& path,
                                               const StoreOptions& options = {});
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Commits checkpoint `step` (>= 0) atomically. Re-committing an existing step
  // replaces it whole (old blobs are removed in the same batch). Blob names
  // must be non-empty. Throws std::invalid_argument on bad arguments and
  // std::runtime_error when RocksDB fails (then nothing of it is visible).
  void commit(int64_t step, const std::map<std::string, std::string>& blobs,
              const std::map<std::string, std::string>& meta = {});

  std::optional<CheckpointInfo> latest() const;  // highest committed step
  std::vector<CheckpointInfo> list() const;      // committed only, ascending step
  std::optional<CheckpointInfo> info(int64_t step) const;

  // The bytes of blob `name` of committed checkpoint `step`, CRC-verified.
  // Throws std::out_of_range when the step or the name does not exist, and
  // std::runtime_error "checkpoint <step> blob '<name>': ..." on corruption.
  std::string read(int64_t step, const std::string& name) const;
  std::map<std::string, std::string> read_all(int64_t step) const;

  // Keeps the newest `keep_last_n` committed checkpoints (>= 1) and removes the
  // others plus any uncommitted leftovers, then compacts so blob files are
  // reclaimed. Returns how many committed checkpoints were removed.
  int64_t prune(int64_t keep_last_n);

  // Generic key/value API on family "state" or "metrics" (anything else throws
  // std::invalid_argument). put/erase are atomic per call; write() applies
  // several puts (value set) and erases (value nullopt) atomically.
  void put(std::string_view family, const std::string& key, const std::string& value,
           bool sync = false);
  std::optional<std::string> get(std::string_view family, const std::string& key) const;
  void erase(std::string_view family, const std::string& key, bool sync = false);
  void write(std::string_view family,
             const std::vector<std::pair<std::string, std::optional<std::string>>>& ops,
             bool sync = false);
  // All pairs whose key starts with `prefix`, in key order.
  std::vector<std::pair<std::string, std::string>> scan(std::string_view family,
                                                        const std::string& prefix) const;

  const std::string& path() const;

  // Test hooks, to simulate what a crash cannot produce through commit():
  // writes blobs and manifest of `step` WITHOUT the committed marker, and
  // overwrites one stored blob without touching its manifest.
  void write_uncommitted_for_testing(int64_t step, const std::map<std::string, std::string>& blobs);
  void overwrite_blob_for_testing(int64_t step, const std::string& name, const std::string& bytes);

 private:
  struct Impl;
  explicit CheckpointStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // owns the DB and its column family handles
};

}  // namespace saccade::storage
