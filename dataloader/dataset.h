// The dataset interface of saccade's data loader: indexed, thread-safe, torch-free.
//
// A Dataset maps an index in [0, size()) to a decoded image. Decoding can fail
// (a corrupt or unreadable file): get() then returns std::nullopt instead of
// throwing, the failure is counted once per file in stats() and logged once.
// get_or_next_good() is the loader's skipping policy: it walks forward from the
// requested index (wrapping around) to the first good sample, so the same
// request always yields the same sample on every rank and thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

namespace saccade::data {

// One decoded image. The Mat owns its pixels (never a view into the dataset).
struct Sample {
  cv::Mat image;       // CV_8UC1 or CV_8UC3, HWC, RGB order for colour
  int64_t label = -1;  // class index, -1 when unlabeled
  std::string source;  // file path or "idx:<file>#<i>", for error messages
};

// Counters of one dataset, safe to read while other threads call get().
class DatasetStats {
 public:
  static constexpr size_t kMaxSkippedPaths = 64;  // bound on the kept list

  void record_decoded() { decoded_.fetch_add(1, std::memory_order_relaxed); }
  // The caller guarantees one call per corrupt file (see ImageFolderDataset).
  void record_corrupt(const std::string& source);

  // Successful get() calls (a sample read twice counts twice).
  int64_t decoded() const { return decoded_.load(std::memory_order_relaxed); }
  // Distinct files found corrupt so far.
  int64_t skipped_corrupt() const { return skipped_.load(std::memory_order_relaxed); }
  // The first kMaxSkippedPaths corrupt files, in the order they were found.
  std::vector<std::string> skipped_paths() const;

 private:
  std::atomic<int64_t> decoded_{0};
  std::atomic<int64_t> skipped_{0};
  mutable std::mutex mutex_;  // guards skipped_paths_
  std::vector<std::string> skipped_paths_;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // Number of classes (labels are 0..num_classes()-1); 0 when unlabeled.
  virtual int64_t num_classes() const = 0;
  // 1 (grayscale) or 3 (RGB): every sample has this many channels.
  virtual int channels() const = 0;
  // The sample at index, or std::nullopt when its file is corrupt. Throws
  // std::out_of_range for an index outside [0, size()). Safe to call from
  // several threads at once.
  virtual std::optional<Sample> get(int64_t index) const = 0;
  // Counters of decoded and skipped files (a derived dataset forwards its base's).
  virtual const DatasetStats& stats() const = 0;
};

// The first good sample at index, index+1, ... (wrapping around at size()).
// Deterministic: depends only on index and on which files are corrupt. Throws
// std::runtime_error when every sample of the dataset is corrupt.
Sample get_or_next_good(const Dataset& dataset, int64_t index);

}  // namespace saccade::data
