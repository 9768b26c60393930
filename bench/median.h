// The median the benchmarks report (robust to a repetition disturbed by the machine).
#pragma once

#include <algorithm>
#include <vector>

namespace saccade::bench {

// The upper median of `v` (its middle element once sorted); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace saccade::bench
