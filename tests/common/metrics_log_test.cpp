#include "common/metrics_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace saccade {
namespace {

TEST(MetricsLog, AppendsOneJsonObjectPerLine) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("saccade-metrics-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "metrics.jsonl").string();
  {
    MetricsLog log(path);
    log.append("pretrain", 1, {{"loss", 2.5}, {"lr", 1e-4}});
    log.append("pre\"train", 2, {{"loss", NAN}});
  }
  {
    MetricsLog again(path);  // appends, never truncates
    again.append("probe", 3, {});
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"stage\": \"pretrain\", \"step\": 1, \"loss\": 2.5, \"lr\": 0.0001}"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("\"stage\": \"pre\\\"train\", \"step\": 2, \"loss\": null}"),
            std::string::npos)
      << lines[1];
  EXPECT_EQ(lines[2].rfind("{\"time\": ", 0), 0u);
  std::filesystem::remove_all(dir);
}

TEST(MetricsLog, UnwritablePathIsNamed) {
  try {
    MetricsLog log("/proc/nope/metrics.jsonl");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/nope/metrics.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace saccade
