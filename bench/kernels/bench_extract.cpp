// bench_extract: Google Benchmark cases for table build, integral extraction and the
// crop-resize baseline; `bench_extract --table [--json PATH] [--quick] [--no-photos]
// [--no-baseline] [--sizes 256,1024,...] [--threads 1,0] [--repetitions N] [--fresh-gazes]
// [--cold-cache] [--accuracy-patches N]`
// runs the full workload table instead (run_extract_bench, what `saccade bench extract`
// calls).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "bench/kernels/extract_bench.h"
#include "kernels/crop_resize.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"
#include "kernels/parallel.h"
#include "kernels/pyramid.h"

namespace {

using namespace saccade::kernels;

// One random RGB image per side, kept for the whole run.
const std::vector<std::uint8_t>& image_of(int side) {
  static std::map<int, std::vector<std::uint8_t>> cache;
  auto& img = cache[side];
  if (img.empty()) {
    img.resize(static_cast<std::size_t>(side) * side * 3);
    std::uint32_t s = 12345;
    for (auto& v : img) v = static_cast<std::uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  }
  return img;
}

std::vector<CropBox> glimpse_boxes(int side, int steps) {
  std::mt19937_64 rng(42);
  const ImageSize size{side, side};
  std::vector<CropBox> boxes;
  for (int i = 0; i < steps; ++i) {
    const Gaze g = sample_gaze(size, rng);
    to_crop_boxes(multizoom_patches(g, 19), size, 0, &boxes);
    to_crop_boxes(foveal_grid(g, 4.0f, 9), size, 0, &boxes);
  }
  return boxes;
}

void BM_TableBuild(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const ImageView view{image_of(side).data(), side, side, 3, 0};
  IntegralImage table = IntegralImage::build(view, static_cast<int>(state.range(1)));
  for (auto _ : state) table.rebuild(view, static_cast<int>(state.range(1)));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(table.bytes()));
}

void BM_IntegralExtract(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const ImageView view{image_of(side).data(), side, side, 3, 0};
  const IntegralImage table = IntegralImage::build(view, 0);
  const auto boxes = glimpse_boxes(side, 10);
  std::vector<float> out(boxes.size() * 3 * 16 * 16);
  for (auto _ : state)
    extract_patches(std::span<const IntegralImage>(&table, 1), boxes, 16, out.data(),
                    static_cast<int>(state.range(1)));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(boxes.size()));
}

// Patches whose cells are all `range(0)` pixels square at random places on an 8192^2 table,
// 65,536 per iteration (their lines, ~1.2 GB of touches, do not stay cached between
// iterations): the lattice a ViT grid cuts from a power-of-two image. Cell heights with many
// factors of 2 (64, 200, 256, 480) put a patch's lines on a few L1 sets, and its prefetched
// lines evict each other (results/kernels.md, "Cells a multiple of 8 pixels tall"); 61 and 100
// are the control.
void BM_IntegralExtractLattice(benchmark::State& state) {
  constexpr int kSide = 8192, kPatches = 65536, kP = 16;
  const int cell = static_cast<int>(state.range(0));
  static const IntegralImage table =
      IntegralImage::build(ImageView{image_of(kSide).data(), kSide, kSide, 3, 0}, 0);
  std::mt19937_64 rng(cell);
  std::vector<CropBox> boxes(kPatches);
  const int span = kSide - kP * cell;
  for (CropBox& b : boxes) {
    const auto x0 = static_cast<float>(rng() % span), y0 = static_cast<float>(rng() % span);
    b = CropBox{x0, y0, x0 + kP * cell, y0 + kP * cell, 0};
  }
  std::vector<float> out(boxes.size() * 3 * kP * kP);
  for (auto _ : state)
    extract_patches(std::span<const IntegralImage>(&table, 1), boxes, kP, out.data(), 1);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(boxes.size()));
}

void BM_CropResize(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const ImageView view{image_of(side).data(), side, side, 3, 0};
  const auto boxes = glimpse_boxes(side, 1);
  std::vector<float> out(boxes.size() * 3 * 16 * 16);
  CropResizeOptions options;
  options.num_threads = static_cast<int>(state.range(1));
  for (auto _ : state)
    crop_resize_patches(std::span<const ImageView>(&view, 1), boxes, 16, out.data(), options);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(boxes.size()));
}

// "256,1024" -> {256, 1024}.
std::vector<int> int_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    const long n = std::strtol(p, &end, 10);
    if (end == p) break;  // not a number
    v.push_back(static_cast<int>(n));
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

void BM_PyramidBuild(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const ImageView view{image_of(side).data(), side, side, 3, 0};
  // OpenCV reads 0 as "no threads"; the cases' 0 means all cores.
  cv::setNumThreads(state.range(1) == 0 ? hardware_threads() : static_cast<int>(state.range(1)));
  ImagePyramid pyramid = ImagePyramid::build(view);
  for (auto _ : state) pyramid.rebuild(view);  // storage reused, as BM_TableBuild's table
  cv::setNumThreads(1);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(side) * side * 3);
}

void BM_PyramidExtract(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const ImageView view{image_of(side).data(), side, side, 3, 0};
  const ImagePyramid pyramid = ImagePyramid::build(view);
  const auto boxes = glimpse_boxes(side, 10);
  std::vector<float> out(boxes.size() * 3 * 16 * 16);
  for (auto _ : state)
    pyramid_patches(std::span<const ImagePyramid>(&pyramid, 1), boxes, 16, out.data(),
                    static_cast<int>(state.range(1)));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(boxes.size()));
}

BENCHMARK(BM_TableBuild)
    ->ArgsProduct({{256, 1024, 2048, 4096, 8192}, {1, 0}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IntegralExtract)
    ->ArgsProduct({{256, 1024, 4096, 8192}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_IntegralExtractLattice)
    ->ArgsProduct({{16, 61, 64, 100, 200, 256, 480}})
    ->ArgNames({"cell_px"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PyramidBuild)
    ->ArgsProduct({{256, 1024, 4096, 8192}, {1, 0}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PyramidExtract)
    ->ArgsProduct({{256, 1024, 4096, 8192}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CropResize)->ArgsProduct({{256, 1024, 4096}, {1}})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  cv::setNumThreads(1);  // the baseline's threads are ours, as for the integral method
  bool table = false;
  saccade::bench::ExtractBenchOptions options;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--table") == 0) {
      table = true;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      options.json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {  // small sizes, no photos
      options.sizes = {256, 1024};
      options.default_photos = false;
      options.repetitions = 2;
    } else if (std::strcmp(argv[i], "--no-photos") == 0) {
      options.default_photos = false;
    } else if (std::strcmp(argv[i], "--no-baseline") == 0) {
      options.baseline = false;
    } else if (std::strcmp(argv[i], "--fresh-gazes") == 0) {
      options.fresh_gazes = true;
    } else if (std::strcmp(argv[i], "--cold-cache") == 0) {
      options.cold_cache = true;
    } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      options.sizes = int_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      options.threads = int_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--accuracy-patches") == 0 && i + 1 < argc) {
      options.accuracy_patches = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--repetitions") == 0 && i + 1 < argc) {
      options.repetitions = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (table) return saccade::bench::run_extract_bench(options);
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
