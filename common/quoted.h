// One way to write a string literal: double-quoted with \", \\, \n, \t and
// \u00XX escapes, which JSON and TOML basic strings read alike.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saccade {

std::string quote_text(std::string_view text);

// A JSON array of numbers with 6 decimals: [0.500000, 0.250000].
std::string json_numbers(const std::vector<double>& values);

}  // namespace saccade
