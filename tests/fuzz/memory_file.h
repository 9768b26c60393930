// The fuzz input as a file, for the readers that take a path: one memory-backed file
// (memfd) per process, rewritten for each input and named by its /proc/self/fd path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace saccade::fuzz {

inline const std::string& memory_file(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("saccade-fuzz", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return path;
}

}  // namespace saccade::fuzz
