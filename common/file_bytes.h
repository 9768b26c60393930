// Whole files as bytes: the stages' small outputs (task heads, policies, reports).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace saccade {

// Throws std::runtime_error naming the file when it cannot be read.
std::string read_file_bytes(const std::filesystem::path& path);
// Replaces the file's contents at once (a sibling file renamed over it: never half written);
// throws std::runtime_error naming the file on failure.
void write_file_bytes(const std::filesystem::path& path, std::string_view bytes);

}  // namespace saccade
