// A RocksDB store of GRPO rollouts: one value per (policy version, image), the
// encoded wire::RolloutGroup of that image's traces (workers/policy/
// rollout_codec.h). The policy learner writes every rollout batch it trains on
// in ONE WriteBatch, so a batch is either whole or absent after a crash, and
// keeps the newest `keep_versions` versions. Bytes in, bytes out: no torch.
// Values live in blob files (multi-MB groups do not churn through compactions).
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace saccade::storage {

class RolloutStore {
 public:
  // (image id, encoded group) pairs of one rollout batch.
  using Groups = std::vector<std::pair<uint64_t, std::string>>;

  // Opens (creating if missing) the store at `path`. keep_versions >= 1 keeps
  // that many newest versions, 0 keeps all. Throws std::invalid_argument for a
  // negative keep_versions, std::runtime_error naming the path and RocksDB's
  // reason when it cannot open.
  static std::unique_ptr<RolloutStore> open(const std::string& path, int64_t keep_versions);
  ~RolloutStore();
  RolloutStore(const RolloutStore&) = delete;
  RolloutStore& operator=(const RolloutStore&) = delete;

  // Writes the groups of a rollout batch of `version` atomically (an image
  // already stored under that version is replaced), then drops versions older
  // than the newest keep_versions. Throws std::runtime_error when RocksDB fails.
  void put(uint64_t version, const Groups& groups);

  std::vector<uint64_t> versions() const;  // stored versions, ascending
  Groups read(uint64_t version) const;     // its groups in image id order; empty if none
  const std::string& path() const;

 private:
  struct Impl;
  explicit RolloutStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // owns the DB
};

}  // namespace saccade::storage
