// A tar shard from a cluster file system: data::scan_tar refuses what is not a whole tar
// with an error naming the offset, and every member it indexes lies within the file, its
// data starting on a 512-byte block, and what the index file keeps per member (it is
// line-based) holds no newline in a name and no space in a label.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "dataloader/tar_index.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = saccade::fuzz::memory_file(data, size);
  try {
    for (const saccade::data::TarMember& m : saccade::data::scan_tar(path)) {
      if (m.offset % 512 != 0 || m.offset > size || m.size > size - m.offset) std::abort();
      if (m.name.find('\n') != std::string::npos) std::abort();
      for (const char c : m.inline_text)
        if (std::isspace(static_cast<unsigned char>(c)) || c == '\0') std::abort();
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
