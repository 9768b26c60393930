#include "bench/kernels/extract_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/seconds_since.h"
#include "kernels/crop_resize.h"
#include "kernels/extract.h"
#include "kernels/geometry.h"
#include "kernels/integral_image.h"
#include "kernels/parallel.h"

namespace saccade::bench {
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
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

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
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
    cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
    if (img.empty()) {
      std::fprintf(stderr, "skipping unreadable photo %s\n", path.c_str());
      continue;
    }
    entries.push_back({std::filesystem::path(path).filename().string(), img});
  }

  const int hw = hardware_threads();
  const int patches_per_run = o.steps * (o.multizoom + o.grid * o.grid);
  std::ostringstream json;
  json << "{\n  \"patch_size\": " << o.patch_size
       << ",\n  \"patches_per_image\": " << patches_per_run << ",\n  \"hardware_threads\": " << hw
       << ",\n  \"results\": [";
  std::printf(
      "%d patches per image (%d steps of %d multi-zoom + %dx%d grid), P = %d, RGB; %d hardware "
      "threads\n",
      patches_per_run, o.steps, o.multizoom, o.grid, o.grid, o.patch_size, hw);
  std::printf("load average at start: %.2f; %s gazes per repetition (%d repetitions)%s\n",
              load_average(), o.fresh_gazes ? "fresh" : "the same", std::max(1, o.repetitions),
              o.cold_cache ? "; caches evicted before every step (untimed)" : "");
  std::vector<std::uint64_t> evict_buffer(o.cold_cache ? o.evict_bytes / 8 : 0, 1);
  std::printf("%-34s %11s %4s %10s %10s %9s %9s %11s %8s %7s %8s %5s\n", "image", "HxW", "thr",
              "build_ms", "cold_ms", "int_us/p", "int_cpu", "crop_us/p", "speedup", "lines/p",
              "limit_us", "thp%");
  bool first = true;
  double line_ns = 0;
  {
    // A 8192^2 gray table: 269 MB, far beyond the 32 MB L3.
    std::vector<std::uint8_t> zeros(std::size_t{8192} * 8192, 0);
    line_ns = random_line_ns(IntegralImage::build({zeros.data(), 8192, 8192, 1, 0}, hw));
  }
  for (const Entry& e : entries) {
    const ImageView view{e.image.data, e.image.rows, e.image.cols, 3,
                         static_cast<std::ptrdiff_t>(e.image.step)};
    const ImageSize size{e.image.rows, e.image.cols};
    const int reps = std::max(1, o.repetitions);
    std::vector<std::vector<std::vector<CropBox>>> rep_steps;  // per repetition
    for (int r = 0; r < (o.fresh_gazes ? reps : 1); ++r)
      rep_steps.push_back(make_steps(o, size, o.seed + static_cast<unsigned long long>(r)));
    const auto& steps = rep_steps[0];
    for (int threads_opt : o.threads) {
      const int threads = threads_opt <= 0 ? hw : threads_opt;
      if (threads_opt > 0 && threads_opt > hw) continue;
      auto t0 = Clock::now();
      IntegralImage table = IntegralImage::build(view, threads);
      const double cold = seconds_since(t0);
      std::vector<double> builds;
      for (int r = 0; r < std::max(1, o.repetitions); ++r) {
        t0 = Clock::now();
        table.rebuild(view, threads);
        builds.push_back(seconds_since(t0));
      }
      const double lines = lines_per_patch(table, steps, o.patch_size);
      std::vector<float> out(static_cast<std::size_t>(o.multizoom + o.grid * o.grid) * 3 *
                             o.patch_size * o.patch_size);
      std::vector<double> runs, cpu_runs;
      for (int r = 0; r < reps; ++r) {
        double wall = 0, cpu = 0;
        for (const auto& step : rep_steps[o.fresh_gazes ? r : 0]) {
          if (o.cold_cache) evict_caches(evict_buffer);
          t0 = Clock::now();
          const double c0 = thread_cpu_seconds();
          extract_patches(std::span<const IntegralImage>(&table, 1), step, o.patch_size, out.data(),
                          threads);
          wall += seconds_since(t0);
          cpu += thread_cpu_seconds() - c0;
        }
        runs.push_back(wall);
        cpu_runs.push_back(cpu);
      }
      const double integral_us = median(runs) * 1e6 / patches_per_run;
      // Meaningful for one thread only (other threads' CPU time is not counted).
      const double integral_cpu_us = threads == 1 ? median(cpu_runs) * 1e6 / patches_per_run : 0.0;
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
      std::printf("%-34s %5dx%-5d %4d %10.2f %10.2f %9.3f %9.3f %11.2f %8.1f %7.0f %8.3f %5.0f\n",
                  e.name.c_str(), size.height, size.width, threads, median(builds) * 1e3,
                  cold * 1e3, integral_us, integral_cpu_us, crop_us,
                  crop_us > 0 ? crop_us / integral_us : 0.0, lines, limit_us, thp);
      std::fflush(stdout);
      json << (first ? "" : ",") << "\n    {\"image\": \"" << json_escape(e.name)
           << "\", \"height\": " << size.height << ", \"width\": " << size.width
           << ", \"threads\": " << threads << ", \"build_ms\": " << median(builds) * 1e3
           << ", \"cold_build_ms\": " << cold * 1e3
           << ", \"integral_us_per_patch\": " << integral_us
           << ", \"integral_cpu_us_per_patch\": " << integral_cpu_us
           << ", \"crop_resize_us_per_patch\": " << crop_us
           << ", \"load_average\": " << load_average() << ", \"lines_per_patch\": " << lines
           << ", \"random_line_ns\": " << line_ns << ", \"thp_percent\": " << thp
           << ", \"fresh_gazes\": " << (o.fresh_gazes ? "true" : "false")
           << ", \"cold_cache\": " << (o.cold_cache ? "true" : "false")
           << ", \"repetitions\": " << reps
           << ", \"synthetic\": " << (e.name.rfind("synthetic", 0) == 0 ? "true" : "false") << "}";
      first = false;
    }
  }
  json << "\n  ]\n}\n";
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
    f << json.str();
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace saccade::bench
