// The byte-offset index of a tar file: where each regular member's data lies.
//
// The tar format is parsed here rather than through a library so that opening a
// shard on a parallel file system reads only its 512-byte headers (pread, one
// per member), never the member data. Understood: ustar and GNU headers (octal
// or base-256 sizes, checksum verified), GNU long names ('L'), pax extended
// headers ('x': path and size; 'g' skipped). Only regular files are indexed;
// directories, links and other entries are skipped.
//
// The index is cached beside the tar as TAR.idx, a small text file written
// atomically (temp file + rename) and rebuilt when the tar's size or mtime no
// longer match the ones it records. Where the folder is read-only the index is
// kept in memory only (logged once per process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saccade::data {

struct TarMember {
  std::string name;         // path inside the archive (long and pax names resolved)
  uint64_t offset{};        // byte offset of the data in the tar file
  uint64_t size{};          // bytes of data
  std::string inline_text;  // the data itself for small .cls members (labels), else empty
  bool operator==(const TarMember&) const = default;
};

// Reads the headers of the tar at path. Throws std::runtime_error naming the path
// and the byte offset for a file that is not a tar (bad header checksum), a header
// promising more bytes than the file holds, or a file ending without the
// end-of-archive blocks (a copy cut short).
std::vector<TarMember> scan_tar(const std::string& path);

// The members of the tar at path from TAR.idx when it is current, else scanned
// and cached there. `rebuilt`, when given, says whether the tar was scanned.
std::vector<TarMember> load_tar_index(const std::string& path, bool* rebuilt = nullptr);

// The index file of a tar: path + ".idx".
std::string tar_index_path(const std::string& path);

}  // namespace saccade::data
