#include "dataloader/dataset.h"

#include <stdexcept>

#include <fmt/format.h>

namespace saccade::data {

void DatasetStats::record_corrupt(const std::string& source) {
  skipped_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  if (skipped_paths_.size() < kMaxSkippedPaths) skipped_paths_.push_back(source);
}

std::vector<std::string> DatasetStats::skipped_paths() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_paths_;
}

Sample get_or_next_good(const Dataset& dataset, int64_t index) {
  const int64_t n = dataset.size();
  if (index < 0 || index >= n) {
    throw std::out_of_range(
        fmt::format("get_or_next_good: index {} outside the dataset's [0, {})", index, n));
  }
  // Known-corrupt entries return at once (no second decode), so the walk is cheap.
  for (int64_t step = 0; step < n; ++step) {
    if (auto sample = dataset.get((index + step) % n)) return std::move(*sample);
  }
  throw std::runtime_error(
      fmt::format("get_or_next_good: all {} samples of the dataset are corrupt or unreadable", n));
}

}  // namespace saccade::data
