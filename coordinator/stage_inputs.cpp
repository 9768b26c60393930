#include "coordinator/stage_inputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <system_error>

#include "common/file_bytes.h"

namespace saccade::coordinator {

namespace fs = std::filesystem;

namespace {
// The names of `names` that `info` holds no blob of, in order.
std::vector<std::string> missing_blobs(const storage::CheckpointInfo& info,
                                       const std::vector<std::string>& names) {
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    bool found = false;
    for (const storage::BlobInfo& b : info.blobs) found = found || b.name == name;
    if (!found) missing.push_back(name);
  }
  return missing;
}
}  // namespace

control::Blobs read_blobs(const storage::CheckpointStore& store, int64_t step,
                          const std::vector<std::string>& names) {
  if (names.empty()) return store.read_all(step);
  const auto info = store.info(step);
  if (!info) throw std::runtime_error(fmt::format("no committed checkpoint {}", step));
  const std::vector<std::string> missing = missing_blobs(*info, names);
  if (!missing.empty())
    throw std::runtime_error(fmt::format("checkpoint {} has no blob '{}'", step, missing.front()));
  control::Blobs out;
  for (const std::string& name : names) out[name] = store.read(step, name);
  return out;
}

StageInputs::StageInputs(const JobConfig& config, const storage::CheckpointStore& own,
                         const fs::path& own_path)
    : dir_(config.policy.input_dir.empty() ? config.job.work_dir : config.policy.input_dir),
      own_(own),
      own_path_(own_path) {}

std::pair<int64_t, control::Blobs> StageInputs::checkpoint(int64_t step,
                                                           const std::vector<std::string>& names) {
  std::vector<std::string> tried, lacking;
  // This job's own pretrain stage first, then the input folder's stores.
  std::vector<std::pair<std::string, const storage::CheckpointStore*>> stores;
  if (own_.latest()) stores.emplace_back(own_path_.string(), &own_);
  for (const char* name : {"coordinator.db", "checkpoints.db"}) {
    const fs::path path = dir_ / name;
    std::error_code ec;
    if (fs::equivalent(path, own_path_, ec)) {
      if (stores.empty()) stores.emplace_back(own_path_.string(), &own_);
      continue;
    }
    if (!fs::exists(path)) continue;
    auto& opened = opened_[path.string()];
    if (!opened) {
      storage::StoreOptions read_only;
      read_only.read_only = true;  // its writer (another job's coordinator) may hold it
      opened = storage::CheckpointStore::open(path.string(), read_only);
    }
    stores.emplace_back(path.string(), opened.get());
  }
  for (const auto& [path, store] : stores) {
    tried.push_back(path);
    const auto info = step < 0 ? store->latest() : store->info(step);
    if (!info) continue;
    // An input has the blobs asked for (a store of another job's own stage may not).
    const std::vector<std::string> missing = missing_blobs(*info, names);
    if (!missing.empty()) {
      lacking.push_back(
          fmt::format("{} (checkpoint {} has no {})", path, info->step, fmt::join(missing, ", ")));
      continue;
    }
    return {info->step, read_blobs(*store, info->step, names)};
  }
  if (!lacking.empty())
    throw std::runtime_error(
        fmt::format("no input checkpoint with the blobs asked for: {}", fmt::join(lacking, "; ")));
  if (tried.empty())
    throw std::runtime_error(fmt::format(
        "no checkpoints in the stage's input folder {} (coordinator.db or checkpoints.db)",
        dir_.string()));
  throw std::runtime_error(fmt::format("{} {} no committed checkpoint{}", fmt::join(tried, " and "),
                                       tried.size() > 1 ? "have" : "has",
                                       step < 0 ? "" : fmt::format(" {}", step)));
}

control::Blobs StageInputs::files(const std::vector<std::string>& names, uint64_t max_bytes) const {
  if (names.empty()) throw std::runtime_error("input files: no file named");
  control::Blobs out;
  for (const std::string& name : names) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      throw std::runtime_error(
          fmt::format("input file '{}': expected a plain file name in {}", name, dir_.string()));
    if (std::optional<std::string> bytes = stage_output(name)) {
      out[name] = std::move(*bytes);
      continue;
    }
    const fs::path path = dir_ / name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw std::runtime_error(fmt::format("input file {} does not exist", path.string()));
    const uintmax_t size = fs::file_size(path, ec);
    if (ec)
      throw std::runtime_error(
          fmt::format("input file {}: cannot read its size: {}", path.string(), ec.message()));
    if (size > max_bytes)
      throw std::runtime_error(fmt::format(
          "input file {}: {} bytes, over cluster.max_checkpoint_bytes", path.string(), size));
    out[name] = read_file_bytes(path);
  }
  return out;
}

std::optional<std::string> StageInputs::stage_output(const std::string& name) const {
  for (auto it = outputs_.rbegin(); it != outputs_.rend(); ++it) {
    const auto latest = it->second->latest();
    if (latest && missing_blobs(*latest, {name}).empty())
      return it->second->read(latest->step, name);
  }
  return std::nullopt;
}

}  // namespace saccade::coordinator
