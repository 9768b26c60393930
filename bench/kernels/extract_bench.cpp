#include "bench/kernels/extract_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#if SACCADE_HAS_IMAGE_CODECS
#include <opencv2/imgcodecs.hpp>
#endif

#include "bench/median.h"
#include "common/seconds_since.h"
#include "kernels/crop_resize.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"
#include "kernels/parallel.h"
#include "kernels/pyramid.h"

namespace saccade::bench {

#if defined(SACCADE_BENCH_CUDA)
// extract_bench_cuda.cpp: false when there is no device.
bool run_cuda_extract_rows(const ExtractBenchOptions& o, nlohmann::json& json);
#endif

namespace {

using Clock = std::chrono::steady_clock;
using namespace saccade::kernels;

// CPU time of the calling thread: on a shared machine, a single-threaded run's
// CPU time excludes the time other processes held the core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  f >> v;
  return v;
}

// Photo-like synthetic image: smooth gradients plus pixel noise.
cv::Mat synthetic_image(int side, std::uint64_t seed) {
  cv::Mat img(side, side, CV_8UC3);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int y = 0; y < side; ++y) {
    auto* row = img.ptr<std::uint8_t>(y);
    for (int x = 0; x < side; ++x) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const int noise = static_cast<int>((s >> 58) & 31) - 16;
      for (int c = 0; c < 3; ++c) {
        const int g = (c == 0 ? x : c == 1 ? y : (x + y) / 2) * 200 / side + 28;
        row[x * 3 + c] = static_cast<std::uint8_t>(std::clamp(g + noise, 0, 255));
      }
    }
  }
  return img;
}

struct Entry {
  std::string name;
  cv::Mat image;
};

// The workload's boxes, one vector per step.
std::vector<std::vector<CropBox>> make_steps(const ExtractBenchOptions& o, ImageSize size,
                                             std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<CropBox>> steps(o.steps);
  for (auto& step : steps) {
    const Gaze gaze = sample_gaze(size, rng);
    const float zg =
        static_cast<float>(o.grid_z_min + (o.grid_z_max - o.grid_z_min) * uniform01(rng));
    to_crop_boxes(multizoom_patches(gaze, o.multizoom), size, 0, &step);
    to_crop_boxes(foveal_grid(gaze, zg, o.grid), size, 0, &step);
  }
  return steps;
}

// Distinct 64-byte table lines a patch's corners touch (what its cost is made of).
double lines_per_patch(const IntegralImage& t, const std::vector<std::vector<CropBox>>& steps,
                       int p) {
  std::size_t lines = 0, patches = 0;
  std::vector<std::uintptr_t> ids;
  for (const auto& step : steps)
    for (const CropBox& b : step) {
      ids.clear();
      for (int i = 0; i <= p; ++i) {
        const double yy = std::floor(b.y0 + (static_cast<double>(b.y1) - b.y0) * i / p + 0.5);
        const int y = static_cast<int>(std::clamp<double>(yy, 0, t.height()));
        for (int j = 0; j <= p; ++j) {
          const double xx = std::floor(b.x0 + (static_cast<double>(b.x1) - b.x0) * j / p + 0.5);
          const int x = static_cast<int>(std::clamp<double>(xx, 0, t.width()));
          const auto a = reinterpret_cast<std::uintptr_t>(t.row(y) + t.column(x));
          ids.push_back(a >> 6);
          ids.push_back((a + 4 * t.channels() - 1) >> 6);
        }
      }
      std::sort(ids.begin(), ids.end());
      lines += std::unique(ids.begin(), ids.end()) - ids.begin();
      ++patches;
    }
  return static_cast<double>(lines) / static_cast<double>(patches);
}

// Nanoseconds per independent random 64-byte line read by one core from a table
// far bigger than the caches: the memory system's limit for scattered corners.
double random_line_ns(const IntegralImage& t) {
  const std::size_t words = t.bytes() / 4;
  const std::size_t n = 1 << 22;
  std::vector<std::uint32_t> idx(n);
  std::mt19937_64 rng(7);
  for (auto& i : idx) i = static_cast<std::uint32_t>((rng() % (words / 16)) * 16);
  const std::uint32_t* base = t.row(0);
  std::uint32_t sum = 0;
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) sum += base[idx[i]];
  const double s = seconds_since(t0);
  if (sum == 0x12345678u) std::printf(" ");  // keep the loads
  return s * 1e9 / n;
}

// Reads every line of `buffer` so what was cached before is evicted.
void evict_caches(std::vector<std::uint64_t>& buffer) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < buffer.size(); i += 8) sum += buffer[i]++;
  if (sum == 0x123456789ULL) std::printf(" ");  // keep the loads
}

// The exact box average of a patch's cells under extract_patches' border rule,
// summed directly from the pixels in double (independent of any table): the value
// every method is scored against. Layout [C, P, P].
void exact_box_average(const ImageView& img, const CropBox& b, int p, std::vector<double>& out) {
  const int C = img.channels;
  const std::ptrdiff_t stride =
      img.row_stride != 0 ? img.row_stride : static_cast<std::ptrdiff_t>(img.width) * C;
  const auto borders = [p](float lo, float hi) {  // b_k, as extract.h states it
    std::vector<std::int64_t> e(p + 1);
    const double step = (static_cast<double>(hi) - lo) / p;
    for (int k = 0; k <= p; ++k)
      e[k] = static_cast<std::int64_t>(std::floor(static_cast<double>(lo) + step * k + 0.5));
    return e;
  };
  const auto bx = borders(b.x0, b.x1), by = borders(b.y0, b.y1);
  out.assign(static_cast<std::size_t>(C) * p * p, 0.0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j) {
      // Cell k spans [b_k, max(b_{k+1}, b_k + 1)); the outside is zero but counts.
      const std::int64_t ye = std::max(by[i + 1], by[i] + 1), xe = std::max(bx[j + 1], bx[j] + 1);
      const double area = static_cast<double>(ye - by[i]) * static_cast<double>(xe - bx[j]);
      const std::int64_t y0 = std::max<std::int64_t>(by[i], 0),
                         y1 = std::min<std::int64_t>(ye, img.height);
      const std::int64_t x0 = std::max<std::int64_t>(bx[j], 0),
                         x1 = std::min<std::int64_t>(xe, img.width);
      for (int c = 0; c < C; ++c) {
        std::uint64_t sum = 0;
        for (std::int64_t y = y0; y < y1; ++y) {
          const std::uint8_t* row = img.data + y * stride;
          for (std::int64_t x = x0; x < x1; ++x) sum += row[x * C + c];
        }
        out[(static_cast<std::size_t>(c) * p + i) * p + j] = static_cast<double>(sum) / area;
      }
    }
}

// Absolute error on the 0..255 scale: the per-patch mean and per-patch max, each
// averaged over patches, and the largest error of any value.
struct Error {
  double mean = 0, max = 0, worst = 0;
};

struct Accuracy {
  Error integral, pyramid, crop_resize;
  int patches = 0;
};

std::string fmt_crop(const Error& e) {
  char buf[96];
  std::snprintf(buf, sizeof buf, ", crop + INTER_AREA %.3f / %.1f / %.0f", e.mean, e.max, e.worst);
  return buf;
}

Accuracy measure_accuracy(const ExtractBenchOptions& o, const ImageView& view,
                          const IntegralImage& table, const ImagePyramid& pyramid,
                          const std::vector<std::vector<CropBox>>& steps) {
  std::vector<CropBox> boxes;
  for (const auto& step : steps)
    for (const CropBox& b : step)
      if (static_cast<int>(boxes.size()) < o.accuracy_patches) boxes.push_back(b);
  Accuracy acc;
  acc.patches = static_cast<int>(boxes.size());
  const std::size_t n = static_cast<std::size_t>(view.channels) * o.patch_size * o.patch_size;
  std::vector<float> integral(boxes.size() * n), pyr(boxes.size() * n), crop(boxes.size() * n);
  extract_patches(std::span<const IntegralImage>(&table, 1), boxes, o.patch_size, integral.data(),
                  0);
  pyramid_patches(std::span<const ImagePyramid>(&pyramid, 1), boxes, o.patch_size, pyr.data(), 0);
  if (o.baseline) {
    CropResizeOptions co;
    co.num_threads = 0;
    crop_resize_patches(std::span<const ImageView>(&view, 1), boxes, o.patch_size, crop.data(), co);
  }
  std::vector<double> exact;
  const auto score = [&](const std::vector<float>& got, std::size_t i, const Error& e) {
    Error r = e;
    double sum = 0, patch_max = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const double d = std::abs(static_cast<double>(got[i * n + k]) - exact[k]);
      sum += d;
      patch_max = std::max(patch_max, d);
    }
    const double patches = static_cast<double>(boxes.size());
    r.mean += sum / static_cast<double>(n) / patches;
    r.max += patch_max / patches;
    r.worst = std::max(r.worst, patch_max);
    return r;
  };
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    exact_box_average(view, boxes[i], o.patch_size, exact);
    acc.integral = score(integral, i, acc.integral);
    acc.pyramid = score(pyr, i, acc.pyramid);
    if (o.baseline) acc.crop_resize = score(crop, i, acc.crop_resize);
  }
  return acc;
}

}  // namespace

int run_extract_bench(const ExtractBenchOptions& o) {
  std::vector<Entry> entries;
  for (int side : o.sizes)
    entries.push_back({"synthetic " + std::to_string(side) + "^2", synthetic_image(side, side)});
  std::vector<std::string> photos = o.photos;
  if (photos.empty() && o.default_photos && std::filesystem::is_directory("/usr/share/backgrounds"))
    for (const auto& e : std::filesystem::directory_iterator("/usr/share/backgrounds"))
      if (e.path().extension() == ".jpg") photos.push_back(e.path().string());
  std::sort(photos.begin(), photos.end());
  for (const auto& path : photos) {
#if SACCADE_HAS_IMAGE_CODECS
    cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
#else
    cv::Mat img;  // this build decodes no image files (SACCADE_IMAGE_CODECS=OFF)
#endif
    if (img.empty()) {
      std::fprintf(stderr, "skipping unreadable photo %s\n", path.c_str());
      continue;
    }
    entries.push_back({std::filesystem::path(path).filename().string(), img});
  }

  const int hw = hardware_threads();
  const int patches_per_run = o.steps * (o.multizoom + o.grid * o.grid);
  nlohmann::json json = {{"patch_size", o.patch_size},      {"patches_per_image", patches_per_run},
                         {"hardware_threads", hw},          {"results", nlohmann::json::array()},
                         {"cuda", nlohmann::json::array()}, {"accuracy", nlohmann::json::array()}};
  std::printf(
      "%d patches per image (%d steps of %d multi-zoom + %dx%d grid), P = %d, RGB; %d hardware "
      "threads\n",
      patches_per_run, o.steps, o.multizoom, o.grid, o.grid, o.patch_size, hw);
  std::printf("load average at start: %.2f; %s gazes per repetition (%d repetitions)%s\n",
              load_average(), o.fresh_gazes ? "fresh" : "the same", std::max(1, o.repetitions),
              o.cold_cache ? "; caches evicted before every step (untimed)" : "");
  std::printf(
      "methods: integral image (exact box average), image pyramid (pyrDown levels, bilinear from "
      "the nearest level), crop + INTER_AREA resize\n");
  std::vector<std::uint64_t> evict_buffer(o.cold_cache ? o.evict_bytes / 8 : 0, 1);
  std::printf("%-34s %11s %4s %9s %8s %9s %9s %8s %8s %10s %8s %7s %8s %5s\n", "image", "HxW",
              "thr", "build_ms", "pyr_ms", "int_us/p", "int_cpu", "pyr_us/p", "pyr_cpu",
              "crop_us/p", "speedup", "lines/p", "limit_us", "thp%");
  double line_ns = 0;
  {
    // A 8192^2 gray table: 269 MB, far beyond the 32 MB L3.
    std::vector<std::uint8_t> zeros(std::size_t{8192} * 8192, 0);
    line_ns = random_line_ns(IntegralImage::build({zeros.data(), 8192, 8192, 1, 0}, hw));
  }
  const int reps = std::max(1, o.repetitions);
  for (const Entry& e : entries) {
    const ImageView view{e.image.data, e.image.rows, e.image.cols, 3,
                         static_cast<std::ptrdiff_t>(e.image.step)};
    const ImageSize size{e.image.rows, e.image.cols};
    const bool synthetic = e.name.rfind("synthetic", 0) == 0;
    std::vector<std::vector<std::vector<CropBox>>> rep_steps;  // per repetition
    for (int r = 0; r < (o.fresh_gazes ? reps : 1); ++r)
      rep_steps.push_back(make_steps(o, size, o.seed + static_cast<unsigned long long>(r)));
    const auto& steps = rep_steps[0];
    ImagePyramid pyramid;
    for (int threads_opt : o.threads) {
      const int threads = threads_opt <= 0 ? hw : threads_opt;
      if (threads_opt > 0 && threads_opt > hw) continue;
      auto t0 = Clock::now();
      IntegralImage table = IntegralImage::build(view, threads);
      const double cold = seconds_since(t0);
      std::vector<double> builds, pyramid_builds;
      for (int r = 0; r < reps; ++r) {
        t0 = Clock::now();
        table.rebuild(view, threads);
        builds.push_back(seconds_since(t0));
        // pyrDown gets as many threads (OpenCV's own) as the table build.
        const int opencv_threads = cv::getNumThreads();
        cv::setNumThreads(threads);
        t0 = Clock::now();
        pyramid.rebuild(view);
        pyramid_builds.push_back(seconds_since(t0));
        cv::setNumThreads(opencv_threads);
      }
      const double lines = lines_per_patch(table, steps, o.patch_size);
      std::vector<float> out(static_cast<std::size_t>(o.multizoom + o.grid * o.grid) * 3 *
                             o.patch_size * o.patch_size);
      // Wall and thread-CPU seconds of one repetition of `extract` over the steps.
      const auto time_method = [&](const auto& extract, std::vector<double>& wall_runs,
                                   std::vector<double>& cpu_runs) {
        for (int r = 0; r < reps; ++r) {
          double wall = 0, cpu = 0;
          for (const auto& step : rep_steps[o.fresh_gazes ? r : 0]) {
            if (o.cold_cache) evict_caches(evict_buffer);
            t0 = Clock::now();
            const double c0 = thread_cpu_seconds();
            extract(step);
            wall += seconds_since(t0);
            cpu += thread_cpu_seconds() - c0;
          }
          wall_runs.push_back(wall);
          cpu_runs.push_back(cpu);
        }
      };
      std::vector<double> runs, cpu_runs, pyr_runs, pyr_cpu_runs;
      time_method(
          [&](const std::vector<CropBox>& step) {
            extract_patches(std::span<const IntegralImage>(&table, 1), step, o.patch_size,
                            out.data(), threads);
          },
          runs, cpu_runs);
      time_method(
          [&](const std::vector<CropBox>& step) {
            pyramid_patches(std::span<const ImagePyramid>(&pyramid, 1), step, o.patch_size,
                            out.data(), threads);
          },
          pyr_runs, pyr_cpu_runs);
      const double integral_us = median(runs) * 1e6 / patches_per_run;
      const double pyramid_us = median(pyr_runs) * 1e6 / patches_per_run;
      // Meaningful for one thread only (other threads' CPU time is not counted).
      const double integral_cpu_us = threads == 1 ? median(cpu_runs) * 1e6 / patches_per_run : 0.0;
      const double pyramid_cpu_us =
          threads == 1 ? median(pyr_cpu_runs) * 1e6 / patches_per_run : 0.0;
      double crop_us = 0;
      if (o.baseline) {
        std::vector<double> base_runs;
        CropResizeOptions co;
        co.num_threads = threads;
        for (int r = 0; r < std::max(1, o.baseline_repetitions); ++r) {
          t0 = Clock::now();
          for (const auto& step : steps)
            crop_resize_patches(std::span<const ImageView>(&view, 1), step, o.patch_size,
                                out.data(), co);
          base_runs.push_back(seconds_since(t0));
        }
        crop_us = median(base_runs) * 1e6 / patches_per_run;
      }
      const double limit_us = line_ns > 0 ? lines * line_ns / 1000 : 0;
      // Share of the table backed by transparent huge pages (TLB reach), after the runs.
      const double thp =
          100.0 * static_cast<double>(table.huge_page_bytes()) / static_cast<double>(table.bytes());
      std::printf(
          "%-34s %5dx%-5d %4d %9.2f %8.2f %9.3f %9.3f %8.3f %8.3f %10.2f %8.1f %7.0f %8.3f %5.0f\n",
          e.name.c_str(), size.height, size.width, threads, median(builds) * 1e3,
          median(pyramid_builds) * 1e3, integral_us, integral_cpu_us, pyramid_us, pyramid_cpu_us,
          crop_us, crop_us > 0 ? crop_us / integral_us : 0.0, lines, limit_us, thp);
      std::fflush(stdout);
      json["results"].push_back({{"image", e.name},
                                 {"height", size.height},
                                 {"width", size.width},
                                 {"threads", threads},
                                 {"build_ms", median(builds) * 1e3},
                                 {"cold_build_ms", cold * 1e3},
                                 {"table_bytes", table.bytes()},
                                 {"pyramid_build_ms", median(pyramid_builds) * 1e3},
                                 {"pyramid_bytes", pyramid.bytes()},
                                 {"integral_us_per_patch", integral_us},
                                 {"integral_cpu_us_per_patch", integral_cpu_us},
                                 {"pyramid_us_per_patch", pyramid_us},
                                 {"pyramid_cpu_us_per_patch", pyramid_cpu_us},
                                 {"crop_resize_us_per_patch", crop_us},
                                 {"load_average", load_average()},
                                 {"lines_per_patch", lines},
                                 {"random_line_ns", line_ns},
                                 {"thp_percent", thp},
                                 {"fresh_gazes", o.fresh_gazes},
                                 {"cold_cache", o.cold_cache},
                                 {"repetitions", reps},
                                 {"synthetic", synthetic}});
      if (threads_opt == o.threads.back() && o.accuracy_patches > 0) {
        const Accuracy acc = measure_accuracy(o, view, table, pyramid, steps);
        std::printf(
            "  %s: |error| vs the exact box average over %d patches (0..255), per-patch mean / "
            "per-patch max / worst: integral %.2g / %.2g / %.2g, pyramid %.3f / %.1f / %.0f%s; "
            "memory: table %.1f MB, pyramid %.1f MB\n",
            e.name.c_str(), acc.patches, acc.integral.mean, acc.integral.max, acc.integral.worst,
            acc.pyramid.mean, acc.pyramid.max, acc.pyramid.worst,
            o.baseline ? fmt_crop(acc.crop_resize).c_str() : "",
            static_cast<double>(table.bytes()) / 1e6, static_cast<double>(pyramid.bytes()) / 1e6);
        json["accuracy"].push_back({{"image", e.name},
                                    {"height", size.height},
                                    {"width", size.width},
                                    {"synthetic", synthetic},
                                    {"patches", acc.patches},
                                    {"integral_mean_abs", acc.integral.mean},
                                    {"integral_max_abs", acc.integral.max},
                                    {"integral_worst_abs", acc.integral.worst},
                                    {"pyramid_worst_abs", acc.pyramid.worst},
                                    {"crop_resize_worst_abs", acc.crop_resize.worst},
                                    {"pyramid_mean_abs", acc.pyramid.mean},
                                    {"pyramid_max_abs", acc.pyramid.max},
                                    {"crop_resize_mean_abs", acc.crop_resize.mean},
                                    {"crop_resize_max_abs", acc.crop_resize.max},
                                    {"table_bytes", table.bytes()},
                                    {"pyramid_bytes", pyramid.bytes()}});
      }
    }
  }
#if defined(SACCADE_BENCH_CUDA)
  if (o.cuda) run_cuda_extract_rows(o, json);
#else
  if (o.cuda) std::printf("CUDA rows: not compiled (a build with SACCADE_WITH_CUDA has them)\n");
#endif
  if (line_ns > 0)
    std::printf(
        "random 64-byte line read, 1 core, 269 MB table: %.2f ns/line (limit_us = lines/p x "
        "this)\n",
        line_ns);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    f << json.dump(2) << "\n";
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace saccade::bench
