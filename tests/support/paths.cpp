#include "tests/support/paths.h"

namespace saccade::testing {

std::string source_path(const std::string& relative) {
  return std::string(SACCADE_SOURCE_DIR) + "/" + relative;
}

std::string build_path(const std::string& relative) {
  return std::string(SACCADE_BINARY_DIR) + "/" + relative;
}

}  // namespace saccade::testing
