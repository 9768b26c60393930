#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include "tests/support/temp_dir.h"

namespace saccade {
namespace {

TEST(Logging, EveryLineCarriesRoleAndRank) {
  const testing::TempDir scratch("log");
  const std::filesystem::path dir = scratch.path();
  init_logging({"learner", 3, "info", dir.string()});
  spdlog::info("hello {}", 42);
  spdlog::debug("not shown at info");
  spdlog::default_logger()->flush();
  std::ifstream in(dir / "learner-3.log");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("[learner:3 pid " + std::to_string(::getpid()) + "] hello 42"),
            std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("not shown"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Logging, UnknownLevelIsRefused) {
  try {
    init_logging({"cli", 0, "verbose", ""});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("got \"verbose\""), std::string::npos);
  }
}

}  // namespace
}  // namespace saccade
