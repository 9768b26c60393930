#include "common/metrics_log.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include "tests/support/temp_dir.h"

namespace saccade {
namespace {

TEST(MetricsLog, AppendsOneJsonObjectPerLine) {
  const testing::TempDir scratch("metrics");
  const std::filesystem::path dir = scratch.path();
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
  // Each line is one JSON object: time, stage, step, then the values in order.
  const auto first = nlohmann::ordered_json::parse(lines[0]);
  EXPECT_GT(first["time"].get<double>(), 1.7e9);
  EXPECT_EQ(first["stage"], "pretrain");
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["loss"], 2.5);
  EXPECT_EQ(first["lr"], 1e-4);
  std::vector<std::string> keys;
  for (const auto& [k, v] : first.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"time", "stage", "step", "loss", "lr"}));
  const auto second = nlohmann::ordered_json::parse(lines[1]);  // quotes escaped, NaN as null
  EXPECT_EQ(second["stage"], "pre\"train");
  EXPECT_TRUE(second["loss"].is_null());
  EXPECT_EQ(nlohmann::ordered_json::parse(lines[2])["step"], 3);
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
