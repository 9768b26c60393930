// A tar shard's cached index (TAR.idx beside it: a text file on a shared file system, which
// a process killed mid-write, another version or another tool may have left behind):
// data::load_tar_index takes it only when it is whole and agrees with the tar, else scans
// the tar again. Whatever the index holds, a good shard still opens, and every member lies
// within it. The input is the index's body, after the header line that names this tar.
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "common/file_bytes.h"
#include "dataloader/tar_index.h"

namespace {

namespace fs = std::filesystem;

struct Shard {
  fs::path dir;
  std::string tar;     // a tar of two members written by GNU tar
  std::string header;  // the index's first line, as load_tar_index writes it for this tar
  uint64_t size = 0;
};

const Shard& shard() {
  static const Shard s = [] {
    Shard s;
    // In TMPDIR (scripts/fuzz.sh gives each run a folder of its own and removes it after):
    // libFuzzer ends a run without the process's exit handlers.
    s.dir = fs::temp_directory_path() / fmt::format("saccade-fuzz-tar-index-{}", ::getpid());
    fs::create_directories(s.dir / "members");
    saccade::write_file_bytes(s.dir / "members" / "a.jpg", std::string(600, 'j'));
    saccade::write_file_bytes(s.dir / "members" / "a.cls", "3");
    s.tar = (s.dir / "shard.tar").string();
    const std::string command = fmt::format("tar --format=gnu -b 1 -C '{}' -cf '{}' a.jpg a.cls",
                                            (s.dir / "members").string(), s.tar);
    if (std::system(command.c_str()) != 0) std::abort();
    (void)saccade::data::load_tar_index(s.tar);  // writes the index
    std::ifstream in(saccade::data::tar_index_path(s.tar));
    if (!std::getline(in, s.header)) std::abort();
    s.size = fs::file_size(s.tar);
    return s;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Shard& s = shard();
  saccade::write_file_bytes(
      saccade::data::tar_index_path(s.tar),
      s.header + "\n" + std::string(reinterpret_cast<const char*>(data), size));
  for (const saccade::data::TarMember& m : saccade::data::load_tar_index(s.tar)) {
    if (m.offset > s.size || m.size > s.size - m.offset || m.name.empty()) std::abort();
  }
  return 0;
}
