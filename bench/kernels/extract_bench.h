// The extraction benchmark as a library function, so both the Google Benchmark binary
// (bench_extract --table) and the CLI (`saccade bench extract`) can run it: the integral
// image against its O(1) peer (an image pyramid) and crop + INTER_AREA resize, in time,
// memory and accuracy against the exact box average.
// Workload per image: `steps` glimpses of one multi-zoom stack (M patches, z in
// linspace(0, 5, M)) plus a G x G foveal grid (z uniform in [grid_z_min, grid_z_max])
// at a random gaze: 10 x (19 + 81) = 1,000 patches, P = 16, by default.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace saccade::bench {

struct ExtractBenchOptions {
  std::vector<int> sizes = {256, 1024, 2048, 4096, 8192};  // synthetic square RGB images
  std::vector<std::string> photos;                         // JPEG/PNG paths; empty = none
  bool default_photos = true;  // add /usr/share/backgrounds/*.jpg when photos is empty
  int patch_size = 16;
  int steps = 10;
  int multizoom = 19;
  int grid = 9;
  float grid_z_min = 3.0f, grid_z_max = 5.0f;
  int repetitions = 5;           // integral method; the median is reported
  int baseline_repetitions = 1;  // crop-resize (slow on big images)
  bool baseline = true;
  // Each repetition of the integral method uses new random gazes (seed + repetition), so
  // it does not re-read table lines cached by the previous one: the honest figure.
  bool fresh_gazes = false;
  // Before every step, read a buffer 4x the L3 (untimed) so each step starts with
  // the table out of cache at every size: the condition the size-independence
  // target is stated for (a 2048^2 RGB table, 54 MB, is otherwise partly L3-resident).
  bool cold_cache = false;
  std::size_t evict_bytes = std::size_t{128} << 20;
  std::vector<int> threads = {1, 0};  // 0 = all hardware threads
  std::string json_path;              // empty = no JSON
  // Patches per image scored against the exact box average (summed from the pixels
  // in double); 0 = no accuracy figures.
  int accuracy_patches = 300;
  unsigned long long seed = 1234;
  // CUDA rows (builds with SACCADE_WITH_CUDA and a device): table build (upload +
  // scans) and device-to-device extraction of `cuda_patches` patches per size.
  std::vector<int> cuda_sizes = {4096};
  int cuda_patches = 100000;
  bool cuda = true;  // false: skip the CUDA rows
};

// Prints a table to stdout, writes JSON when json_path is set; returns 0 on success.
int run_extract_bench(const ExtractBenchOptions& options);

}  // namespace saccade::bench
