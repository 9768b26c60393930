// `saccade status --json` output as the tests read it: nlohmann::json (strict; a
// parse error throws nlohmann::json::parse_error with the byte offset).
#pragma once

#include <nlohmann/json.hpp>

namespace saccade::testing {

using Json = nlohmann::json;

}  // namespace saccade::testing
