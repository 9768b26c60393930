// A job config (TOML from a user): saccade::parse_config refuses what it cannot use with a
// ConfigError, never another exception or a crash, and what it accepts writes back
// (to_toml) to TOML that parses to the same config: parse_config(to_toml(c)) == c.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string written;
  try {
    // A folder that does not exist: an include is refused, not read from this machine.
    written = saccade::to_toml(saccade::parse_config(text, "/nonexistent/fuzz.toml"));
  } catch (const saccade::ConfigError&) {
    return 0;
  }
  if (saccade::to_toml(saccade::parse_config(written, "/nonexistent/written.toml")) != written)
    std::abort();
  return 0;
}
