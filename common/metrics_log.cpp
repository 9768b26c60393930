#include "common/metrics_log.h"

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace saccade {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const auto s = static_cast<int64_t>(seconds);
  return fmt::format("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_ = std::fopen(path.c_str(), "a");
  if (!file_)
    throw std::runtime_error(fmt::format("metrics file '{}': cannot open for appending", path));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::append(const std::string& stage, int64_t step,
                        const std::vector<std::pair<std::string, double>>& values) {
  nlohmann::ordered_json j = {
      {"time", std::round(now_s() * 1000) / 1000}, {"stage", stage}, {"step", step}};
  for (const auto& [name, value] : values) j[name] = value;  // NaN is written as null
  const std::string line =
      j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::fputs(line.c_str(), file_);
  std::fflush(file_);
}

ProgressLine::ProgressLine(int64_t total_steps, bool enabled, double min_interval_s)
    : total_(total_steps),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) == 1),
      min_interval_s_(min_interval_s) {}

void ProgressLine::update(int64_t step, double loss, double lr, double images_per_second,
                          double tflops, double mfu) {
  if (!enabled_) return;
  const double t = now_s();
  if (start_step_ < 0) {
    start_step_ = step;
    start_ = t;
  }
  if (!tty_ && t - last_print_ < min_interval_s_ && step < total_) return;
  last_print_ = t;
  const double rate = (step - start_step_) / std::max(1e-9, t - start_);
  const double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : NAN;
  std::string compute;
  if (std::isfinite(tflops)) compute += fmt::format(" | {:.2f} TFLOP/s", tflops);
  if (std::isfinite(mfu)) compute += fmt::format(" | MFU {:.1f}%", 100 * mfu);
  const std::string text = fmt::format(
      "step {}/{} ({:.0f}%) | loss {:.4f} | lr {:.3g} | {:.1f} img/s{} | ETA {}{}{}", step, total_,
      100.0 * step / std::max<int64_t>(1, total_), loss, lr, images_per_second, compute,
      duration_text(eta), note_.empty() ? "" : " | ", note_);
  std::fprintf(stderr, tty_ ? "\r\033[K%s" : "%s\n", text.c_str());
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (enabled_ && tty_) std::fputc('\n', stderr);
}

}  // namespace saccade
