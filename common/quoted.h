// One way to write a string literal: double-quoted with \", \\, \n, \t and
// \u00XX escapes, which JSON and TOML basic strings read alike.
#pragma once

#include <string>
#include <string_view>

namespace saccade {

std::string quote_text(std::string_view text);

}  // namespace saccade
