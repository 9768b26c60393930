#include "common/file_bytes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>

#include "tests/support/temp_dir.h"

namespace saccade {
namespace {

namespace fs = std::filesystem;

size_t entries(const fs::path& folder) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(folder), {}));
}

// Reports are rewritten as a run goes and read while it runs: a write replaces the whole
// file through a sibling renamed over it, and leaves no sibling behind, whatever happens.
TEST(FileBytes, AWriteReplacesTheWholeFileAndLeavesNothingBeside) {
  const testing::TempDir scratch("file-bytes");
  const fs::path path = scratch.path() / "report.json";
  write_file_bytes(path, std::string(100000, 'a'));
  write_file_bytes(path, "short");
  EXPECT_EQ(read_file_bytes(path), "short");
  EXPECT_EQ(entries(scratch.path()), 1u);
}

// A reader of a file being rewritten sees the old bytes or the new, never part of them.
TEST(FileBytes, AReaderNeverSeesAHalfWrittenFile) {
  const testing::TempDir scratch("file-bytes-reader");
  const fs::path path = scratch.path() / "report.json";
  const std::string a(200000, 'a'), b(100000, 'b');
  write_file_bytes(path, a);
  std::atomic<bool> done{false};
  int torn = 0, reads = 0;
  std::thread reader([&] {
    while (!done) {
      const std::string seen = read_file_bytes(path);
      torn += seen != a && seen != b;
      ++reads;
    }
  });
  for (int i = 0; i < 300; ++i) write_file_bytes(path, i % 2 ? a : b);
  done = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_GT(reads, 0);
}

TEST(FileBytes, AWriteThatCannotLandNamesTheFileAndLeavesNothingBeside) {
  const testing::TempDir scratch("file-bytes-refused");
  // A folder where the file would go: the rename fails, the folder stays as it was.
  const fs::path folder = scratch.path() / "report.json";
  fs::create_directory(folder);
  try {
    write_file_bytes(folder, "bytes");
    FAIL() << "wrote over a folder";
  } catch (const std::runtime_error& e) {
    // The rename's own cause, not that of the clean-up after it ("Success").
    EXPECT_NE(std::string(e.what()).find("cannot write " + folder.string() + ": Is a directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_directory(folder));
  EXPECT_EQ(entries(scratch.path()), 1u);
  const fs::path nowhere = scratch.path() / "missing" / "report.json";
  try {
    write_file_bytes(nowhere, "bytes");
    FAIL() << "wrote into a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + nowhere.string() + ": No such file"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(read_file_bytes(nowhere), std::runtime_error);
}

}  // namespace
}  // namespace saccade
