#include "common/file_bytes.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace saccade {

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

void write_file_bytes(const std::filesystem::path& path, std::string_view bytes) {
  // A sibling then a rename: a reader, or a process killed mid-write, sees the old bytes or
  // the new ones, never part of them (reports rewritten as a run goes are read as it runs).
  // the pid and a counter: processes and threads writing the same file never share a sibling.
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    if (!file)
      throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file.flush()) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      throw std::runtime_error("cannot write " + path.string());
    }
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) {
    std::error_code ignored;  // keeps the rename's error for the message
    std::filesystem::remove(temp, ignored);
    throw std::runtime_error("cannot write " + path.string() + ": " + error.message());
  }
}

}  // namespace saccade
