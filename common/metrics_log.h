// Metrics as JSON lines: one object per record, appended and flushed, so a
// crashed run keeps everything it logged and any tool can tail the file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace saccade {

class MetricsLog {
 public:
  // Opens `path` for appending (creating its folder). Throws std::runtime_error naming the path.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // {"time": <unix seconds>, "stage": ..., "step": ..., name: value, ...}; non-finite values become
  // null.
  void append(const std::string& stage, int64_t step,
              const std::vector<std::pair<std::string, double>>& values);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;  // owned
};

// A one-line progress display: rewritten in place on a terminal, a plain line
// at most every `min_interval_s` seconds otherwise (logs, CI).
class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, bool enabled, double min_interval_s = 10.0);
  // Shows step, loss, lr, images/s, TFLOP/s and MFU (each when finite) and the ETA
  // from the recent rate.
  void update(int64_t step, double loss, double lr, double images_per_second, double tflops = NAN,
              double mfu = NAN);
  // Text shown at the end of every later line (e.g. the last k-NN check).
  void set_note(std::string note) { note_ = std::move(note); }
  void finish();

 private:
  int64_t total_;
  bool enabled_;
  bool tty_;
  double min_interval_s_;
  double last_print_ = -1e300;
  double start_ = 0;
  int64_t start_step_ = -1;
  std::string note_;
};

}  // namespace saccade
