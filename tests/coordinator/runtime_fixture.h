// GoogleTest fixture for whole-runtime tests: starts coordinator, agents and
// `saccade run` as children with their own logs, asks `saccade status --json`,
// prints the children's logs when a test fails, and checks afterwards that no
// process the test started (or orphaned) survives it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/coordinator/harness.h"
#include "tests/coordinator/json.h"

namespace saccade::testing {

class RuntimeFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  void TearDown() override;

  // Writes `job` as `name` in the test's folder (work dir: <folder>/work).
  std::filesystem::path write_config(const TestJob& job, const std::string& name = "job.toml");
  std::filesystem::path work_dir() const { return dir_.path() / "work"; }

  Child& start(const std::string& name, std::vector<std::string> argv,
               std::vector<std::string> env = {});
  Child& coordinator(const std::filesystem::path& config, const std::string& name = "coordinator");
  // An agent for `node`; its actors run `actor_binary_` (empty: saccade itself, the real bodies).
  Child& agent(const std::filesystem::path& config, int port, const std::string& node,
               std::vector<std::string> env = {});
  // `saccade run CONFIG [extra...]` (coordinator and one local agent in one process
  // tree), logged as `name`.log.
  Child& run(const std::filesystem::path& config, std::vector<std::string> extra = {},
             const std::string& name = "run", std::vector<std::string> env = {});

  // One `saccade status --json` reply, nullopt when the status command failed.
  std::optional<Json> status(const std::filesystem::path& config, int* exit_code = nullptr);
  // Polls status until `pred` holds for a reply (returned) or `timeout` passes.
  std::optional<Json> wait_status(const std::filesystem::path& config,
                                  const std::function<bool(const Json&)>& pred,
                                  std::chrono::milliseconds timeout);

  static const Json* actor(const Json& s, const std::string& role, int rank);
  static bool all_running(const Json& s);
  static bool finished(const Json& s) { return s.at("state").get<std::string>() == "finished"; }

  TempDir dir_;
  std::string actor_binary_;  // what agents run as actors; empty: the real bodies
  std::list<std::pair<std::string, std::unique_ptr<Child>>> children_;
};

}  // namespace saccade::testing
