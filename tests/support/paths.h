// Paths of this checkout and its build, for tests.
//
// Only tests/support/paths.cpp is compiled with them: a path in a compile flag would differ
// in every clone and keep ccache from serving any other test file to a fresh clone (CI).
#pragma once

#include <string>

namespace saccade::testing {

// A file of the checkout (e.g. "configs/tiny.toml" -> SOURCE/configs/tiny.toml).
std::string source_path(const std::string& relative);

// A file of this build (e.g. "saccade" -> BUILD/saccade).
std::string build_path(const std::string& relative);

}  // namespace saccade::testing
