#include "tests/coordinator/runtime_fixture.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iostream>

#include "tests/support/subprocess.h"

namespace saccade::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string& saccade_binary() {
  static const std::string path = build_path("saccade");
  return path;
}

std::string tail(const std::string& s) {
  return s.size() > 6000 ? s.substr(s.size() - 6000) : s;
}

}  // namespace

void RuntimeFixture::SetUpTestSuite() {
  adopt_orphans();
}

void RuntimeFixture::TearDown() {
  if (HasFailure()) {
    for (const auto& [name, child] : children_)
      std::cerr << "----- " << name << " -----\n" << tail(child->log()) << "\n";
  }
  children_.clear();  // kills and reaps whatever still runs
  std::vector<pid_t> left;
  const bool clean = wait_until(
      [&] {
        while (waitpid(-1, nullptr, WNOHANG) > 0) {  // orphans re-parented to us
        }
        left = descendants();
        return left.empty();
      },
      5s);
  EXPECT_TRUE(clean) << left.size() << " processes outlived the test, e.g. pid "
                     << (left.empty() ? 0 : left[0]);
  for (pid_t p : left) kill(p, SIGKILL);
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

fs::path RuntimeFixture::write_config(const TestJob& job, const std::string& name) {
  const fs::path file = dir_.path() / name;
  std::ofstream(file) << job_toml(job, work_dir());
  return file;
}

Child& RuntimeFixture::start(const std::string& name, std::vector<std::string> argv,
                             std::vector<std::string> env) {
  children_.emplace_back(name, std::make_unique<Child>(
                                   std::move(argv), dir_.path() / (name + ".log"), std::move(env)));
  return *children_.back().second;
}

Child& RuntimeFixture::coordinator(const fs::path& config, const std::string& name) {
  return start(name, {saccade_binary(), "coordinator", config.string(), "--bind", "127.0.0.1"});
}

Child& RuntimeFixture::agent(const fs::path& config, int port, const std::string& node,
                             std::vector<std::string> env) {
  std::vector<std::string> argv = {
      saccade_binary(), "agent", "--coordinator", "127.0.0.1:" + std::to_string(port),
      "--node",         node,    "--config",      config.string()};
  if (!actor_binary_.empty()) argv.insert(argv.end(), {"--actor-binary", actor_binary_});
  return start("agent-" + node, std::move(argv), std::move(env));
}

Child& RuntimeFixture::run(const fs::path& config, std::vector<std::string> extra,
                           const std::string& name, std::vector<std::string> env) {
  std::vector<std::string> argv = {saccade_binary(), "run", config.string()};
  if (!actor_binary_.empty()) argv.insert(argv.end(), {"--actor-binary", actor_binary_});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return start(name, std::move(argv), std::move(env));
}

std::optional<Json> RuntimeFixture::status(const fs::path& config, int* exit_code) {
  ProcessResult r = run_process({saccade_binary(), "status", "--config", config.string(), "--json",
                                 "--timeout-ms", std::to_string(scaled(1s).count())},
                                10s);
  if (exit_code) *exit_code = r.exit_code;
  if (r.timed_out || r.signal != 0)  // neither an answer nor a refusal: say what happened
    ADD_FAILURE() << "saccade status --config " << config.string()
                  << (r.timed_out ? " ran past 10 s" : "") << " and ended by signal " << r.signal
                  << "; its stderr:\n"
                  << r.err;
  if (r.exit_code != 0) return std::nullopt;
  return Json::parse(r.out);
}

std::optional<Json> RuntimeFixture::wait_status(const fs::path& config,
                                                const std::function<bool(const Json&)>& pred,
                                                std::chrono::milliseconds timeout) {
  std::optional<Json> last;
  wait_until(
      [&] {
        auto s = status(config);
        if (s && pred(*s)) return last = s, true;
        return false;
      },
      timeout);
  return last;
}

const Json* RuntimeFixture::actor(const Json& s, const std::string& role, int rank) {
  for (const Json& a : s.at("actors"))
    if (a.at("role").get<std::string>() == role && a.at("rank").get<double>() == rank) return &a;
  return nullptr;
}

bool RuntimeFixture::all_running(const Json& s) {
  for (const Json& a : s.at("actors"))
    if (a.at("state").get<std::string>() != "running") return false;
  return !s.at("actors").empty();
}

}  // namespace saccade::testing
