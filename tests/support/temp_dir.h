// The one way tests get scratch space: a unique folder under the system temp
// dir (mkdtemp, so parallel tests and reruns never share one), removed with
// everything in it when the TempDir goes out of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace saccade::testing {

class TempDir {
 public:
  // `tag` names the folder (saccade-TAG-XXXXXX), for whoever finds one left by a crash.
  explicit TempDir(const std::string& tag = "test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("saccade-" + tag + "-XXXXXX")).string();
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error("TempDir: mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace saccade::testing
