// `saccade data pack`: an image folder (one subfolder per class, as
// ImageFolderDataset reads it) turned into tar shards TarShardDataset reads.
//
// Samples keep the folder dataset's order; shard i holds samples
// [i * shard_size, (i + 1) * shard_size) as KEY.<ext> (the file's bytes, not
// re-encoded) and KEY.cls (the label as decimal text), KEY being the sample's
// index as 9 digits. Shards are ustar, as GNU tar writes and reads them, each
// written to a temp file and renamed; classes.txt (one class name a line) goes
// beside them, and each shard's index (TAR.idx) is built at once so that a
// read-only copy needs no write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saccade::data {

struct PackOptions {
  std::string folder;            // the image folder
  std::string out;               // created if missing; must hold no .tar file yet
  int64_t shard_size = 1000;     // samples per shard
  std::string prefix = "shard";  // shards are OUT/PREFIX-000000.tar, ...
};

struct PackResult {
  int64_t samples = 0;
  std::vector<std::string> shards;
  uint64_t bytes = 0;  // of all shards
};

// Throws std::invalid_argument naming the option or path for a bad folder, a
// shard_size < 1 or an OUT that already holds shards, std::runtime_error for an
// I/O error (naming the file).
PackResult pack_image_folder(const PackOptions& options);

}  // namespace saccade::data
