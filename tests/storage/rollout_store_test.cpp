#include "storage/rollout_store.h"
#include "tests/support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace saccade::storage {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;  // tests/support/temp_dir.h

// A group's bytes, distinct per (version, image), some past the blob threshold.
std::string group(uint64_t version, uint64_t image) {
  return std::string(image % 2 ? 10000 : 100, static_cast<char>('a' + (version * 7 + image) % 26)) +
         std::to_string(version) + "/" + std::to_string(image);
}

TEST(RolloutStore, KeepsTheNewestVersionsInImageOrderAcrossReopening) {
  TempDir dir;
  {
    auto store = RolloutStore::open(dir.file("rollouts.db"), /*keep_versions=*/2);
    EXPECT_TRUE(store->versions().empty());
    EXPECT_TRUE(store->read(0).empty());
    // Images out of order and ids past 2^32: the key order is (version, image).
    store->put(0, {{300, group(0, 300)}, {5, group(0, 5)}, {1ull << 40, group(0, 1ull << 40)}});
    store->put(1, {{7, group(1, 7)}});
    EXPECT_EQ(store->versions(), (std::vector<uint64_t>{0, 1}));
    const RolloutStore::Groups v0 = store->read(0);
    ASSERT_EQ(v0.size(), 3u);
    EXPECT_EQ(v0[0], (std::pair<uint64_t, std::string>{5, group(0, 5)}));
    EXPECT_EQ(v0[1], (std::pair<uint64_t, std::string>{300, group(0, 300)}));
    EXPECT_EQ(v0[2].first, 1ull << 40);
    // A third version drops the oldest; a second batch of the newest adds to it.
    store->put(2, {{1, group(2, 1)}});
    store->put(2, {{2, group(2, 2)}, {1, group(2, 1) + "!"}});
    EXPECT_EQ(store->versions(), (std::vector<uint64_t>{1, 2}));
    EXPECT_TRUE(store->read(0).empty());
    const RolloutStore::Groups v2 = store->read(2);
    ASSERT_EQ(v2.size(), 2u);
    EXPECT_EQ(v2[0].second, group(2, 1) + "!");  // replaced
    EXPECT_EQ(v2[1].second, group(2, 2));
  }
  auto reopened = RolloutStore::open(dir.file("rollouts.db"), 0);
  EXPECT_EQ(reopened->versions(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(reopened->read(1), (RolloutStore::Groups{{7, group(1, 7)}}));
  // keep_versions = 0 keeps everything.
  for (uint64_t v = 3; v < 8; ++v) reopened->put(v, {{0, group(v, 0)}});
  EXPECT_EQ(reopened->versions().size(), 7u);
}

TEST(RolloutStore, BadArgumentsAreClearErrors) {
  TempDir dir;
  EXPECT_THROW(RolloutStore::open("", 1), std::invalid_argument);
  EXPECT_THROW(RolloutStore::open(dir.file("rollouts.db"), -1), std::invalid_argument);
  auto store = RolloutStore::open(dir.file("rollouts.db"), 1);
  try {
    RolloutStore::open(dir.file("rollouts.db"), 1);  // RocksDB's lock: one writer per store
    FAIL() << "a second open of a locked store succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("rollouts.db")), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace saccade::storage
