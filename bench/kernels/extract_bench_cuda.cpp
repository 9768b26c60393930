// The CUDA rows of the extraction benchmark (compiled only with SACCADE_WITH_CUDA):
// table build on the device (upload + scans) and device-to-device extraction of a
// large batch of foveal patches, against the CPU table built from the same image.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernels/extract_bench.h"
#include "bench/median.h"
#include "common/seconds_since.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/geometry.h"

namespace saccade::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace saccade::kernels;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(err));
}

// Device memory for the patches; owns it.
struct DeviceFloats {
  float* ptr = nullptr;
  explicit DeviceFloats(std::size_t n) {
    check(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(float)), "cudaMalloc");
  }
  ~DeviceFloats() { cudaFree(ptr); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

}  // namespace

bool run_cuda_extract_rows(const ExtractBenchOptions& o, nlohmann::json& json) {
  if (cuda::device_count() == 0) {
    std::printf("CUDA rows: no CUDA device\n");
    return false;
  }
  auto extractor = cuda::make_cuda_extractor(0);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("CUDA rows on %s: %d patches per batch, P = %d, RGB\n", prop.name, o.cuda_patches,
              o.patch_size);
  std::printf("%-18s %10s %12s %12s %14s\n", "image", "build_ms", "extract_ms", "ns/patch",
              "Mpatches/s");
  for (int side : o.cuda_sizes) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(side) * side * 3);
    std::mt19937_64 rng(o.seed);
    for (auto& v : pixels) v = static_cast<std::uint8_t>(rng() >> 56);
    const ImageView view{pixels.data(), side, side, 3, 0};
    const ImageSize size{side, side};
    std::vector<CropBox> boxes;
    while (static_cast<int>(boxes.size()) < o.cuda_patches) {
      const Gaze gaze = sample_gaze(size, rng);
      const float zg =
          static_cast<float>(o.grid_z_min + (o.grid_z_max - o.grid_z_min) * uniform01(rng));
      to_crop_boxes(multizoom_patches(gaze, o.multizoom), size, 0, &boxes);
      to_crop_boxes(foveal_grid(gaze, zg, o.grid), size, 0, &boxes);
    }
    boxes.resize(static_cast<std::size_t>(o.cuda_patches));
    DeviceFloats out(boxes.size() * 3 * o.patch_size * o.patch_size);
    extractor->set_images(std::span<const ImageView>(&view, 1));  // warm-up: allocations
    extractor->extract_to_device(boxes, o.patch_size, out.ptr);
    std::vector<double> builds, extracts;
    for (int r = 0; r < std::max(1, o.repetitions); ++r) {
      auto t0 = Clock::now();
      extractor->set_images(std::span<const ImageView>(&view, 1));  // synchronous
      builds.push_back(seconds_since(t0));
      t0 = Clock::now();
      extractor->extract_to_device(boxes, o.patch_size, out.ptr);  // synchronous
      extracts.push_back(seconds_since(t0));
    }
    const double build_ms = median(builds) * 1e3, extract_ms = median(extracts) * 1e3;
    std::printf("%-18s %10.3f %12.3f %12.2f %14.1f\n",
                ("synthetic " + std::to_string(side) + "^2").c_str(), build_ms, extract_ms,
                extract_ms * 1e6 / static_cast<double>(boxes.size()),
                static_cast<double>(boxes.size()) / (extract_ms * 1e3));
    json["cuda"].push_back({{"device", prop.name},
                            {"height", side},
                            {"width", side},
                            {"patches", boxes.size()},
                            {"build_ms", build_ms},
                            {"extract_ms", extract_ms},
                            {"ns_per_patch", extract_ms * 1e6 / static_cast<double>(boxes.size())},
                            {"repetitions", std::max(1, o.repetitions)}});
  }
  return true;
}

}  // namespace saccade::bench
