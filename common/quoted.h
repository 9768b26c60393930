// A TOML basic string literal (config show/docs): double-quoted with \", \\,
// \n, \t and \u00XX escapes. JSON goes through nlohmann-json instead.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saccade {

std::string quote_text(std::string_view text);

}  // namespace saccade
