#include "storage/checkpoint_store.h"
#include "tests/support/temp_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace saccade::storage {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;  // tests/support/temp_dir.h

// Deterministic bytes for (step, name): every checkpoint's content is checkable.
std::string content(int64_t step, const std::string& name, size_t size) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 1000003u + std::hash<std::string>{}(name));
  std::string bytes(size, '\0');
  for (size_t i = 0; i + 8 <= size; i += 8) {
    const uint64_t v = rng();
    for (int b = 0; b < 8; ++b) bytes[i + b] = static_cast<char>(v >> (8 * b));
  }
  return bytes;
}

std::map<std::string, std::string> checkpoint(int64_t step, int n_blobs, size_t size) {
  std::map<std::string, std::string> blobs;
  for (int i = 0; i < n_blobs; ++i) {
    const std::string name = "tensor/" + std::to_string(i);
    blobs[name] = content(step, name, size + static_cast<size_t>(i) * 8);
  }
  blobs["tiny"] = "x";  // below min_blob_size: stays in the LSM
  return blobs;
}

TEST(CheckpointStore, CommitThenReopenReadsTheSameBytes) {
  TempDir dir;
  const auto blobs = checkpoint(7, 3, 1 << 20);
  {
    auto store = CheckpointStore::open(dir.file("db"));
    EXPECT_FALSE(store->latest().has_value());
    store->commit(7, blobs, {{"epoch", "2"}, {"rng", "abc"}});
    EXPECT_EQ(store->read(7, "tensor/1"), blobs.at("tensor/1"));
  }
  auto store = CheckpointStore::open(dir.file("db"));
  const std::optional<CheckpointInfo> latest = store->latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 7);
  EXPECT_EQ(latest->meta.at("epoch"), "2");
  EXPECT_EQ(latest->meta.at("rng"), "abc");
  ASSERT_EQ(latest->blobs.size(), blobs.size());
  EXPECT_EQ(store->read_all(7), blobs);
  EXPECT_THROW(store->read(7, "missing"), std::out_of_range);
  EXPECT_THROW(store->read(8, "tiny"), std::out_of_range);
}

TEST(CheckpointStore, RecommitReplacesTheWholeCheckpoint) {
  TempDir dir;
  auto store = CheckpointStore::open(dir.file("db"));
  store->commit(3, {{"a", "old-a"}, {"b", "old-b"}});
  store->commit(3, {{"a", "new-a"}});
  const std::map<std::string, std::string> expected = {{"a", "new-a"}};
  EXPECT_EQ(store->read_all(3), expected);
  EXPECT_EQ(store->list().size(), 1u);
}

TEST(CheckpointStore, ListAndLatestAreOrderedByStepNumerically) {
  TempDir dir;
  auto store = CheckpointStore::open(dir.file("db"));
  for (int64_t step : {100, 9, 1000, 20}) store->commit(step, {{"w", std::to_string(step)}});
  std::vector<int64_t> steps;
  for (const CheckpointInfo& info : store->list()) steps.push_back(info.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{9, 20, 100, 1000}));
  EXPECT_EQ(store->latest()->step, 1000);
}

TEST(CheckpointStore, UncommittedCheckpointIsInvisibleAndPreviousIntact) {
  TempDir dir;
  const auto good = checkpoint(10, 2, 100000);
  {
    auto store = CheckpointStore::open(dir.file("db"));
    store->commit(10, good);
    store->write_uncommitted_for_testing(20, checkpoint(20, 2, 100000));
  }
  auto store = CheckpointStore::open(dir.file("db"));
  EXPECT_EQ(store->latest()->step, 10);
  ASSERT_EQ(store->list().size(), 1u);
  EXPECT_FALSE(store->info(20).has_value());
  EXPECT_THROW(store->read(20, "tensor/0"), std::out_of_range);
  EXPECT_EQ(store->read_all(10), good);
  // prune removes the leftover; the committed checkpoint stays.
  EXPECT_EQ(store->prune(5), 0);
  EXPECT_EQ(store->read_all(10), good);
}

TEST(CheckpointStore, KillDuringCommitLoopLeavesOnlyWholeCheckpoints) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the child forks from a threaded process and starts threads (RocksDB's), "
                  "which ThreadSanitizer does not support";
#endif
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // child: commit forever, reporting each step before and after
      close(pipe_fds[0]);
      auto store = CheckpointStore::open(dir.file("db"));
      for (int64_t step = 1;; ++step) {
        const auto blobs = checkpoint(step, 8, 2 << 20);
        char begin = 'b';
        if (write(pipe_fds[1], &begin, 1) != 1) _exit(2);
        store->commit(step, blobs, {{"step", std::to_string(step)}});
        char done = 'd';
        if (write(pipe_fds[1], &done, 1) != 1) _exit(2);
      }
    }
    close(pipe_fds[1]);
    int64_t acknowledged = 0, begun = 0;
    char c;
    // Wait for two whole commits, then kill a few ms into a later one.
    while ((acknowledged < 2 || begun <= acknowledged) && read(pipe_fds[0], &c, 1) == 1)
      (c == 'b' ? begun : acknowledged)++;
    usleep(static_cast<useconds_t>(2000 + 7000 * round));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(pipe_fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child ended on its own: " << status;

    auto store = CheckpointStore::open(dir.file("db"));
    const std::vector<CheckpointInfo> all = store->list();
    ASSERT_FALSE(all.empty());
    EXPECT_GE(store->latest()->step, acknowledged);
    for (const CheckpointInfo& info : all) {
      EXPECT_EQ(info.meta.at("step"), std::to_string(info.step));
      EXPECT_EQ(store->read_all(info.step), checkpoint(info.step, 8, 2 << 20))
          << "step " << info.step << " round " << round;
    }
  }
}

TEST(CheckpointStore, PruneKeepsTheLastN) {
  TempDir dir;
  auto store = CheckpointStore::open(dir.file("db"));
  for (int64_t step = 1; step <= 6; ++step) store->commit(step, checkpoint(step, 1, 50000));
  EXPECT_EQ(store->prune(2), 4);
  std::vector<int64_t> steps;
  for (const CheckpointInfo& info : store->list()) steps.push_back(info.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(store->read_all(6), checkpoint(6, 1, 50000));
  EXPECT_THROW(store->read(4, "tiny"), std::out_of_range);
  EXPECT_EQ(store->prune(2), 0);
  EXPECT_THROW(store->prune(0), std::invalid_argument);
}

TEST(CheckpointStore, ChecksumDetectsAChangedValue) {
  TempDir dir;
  auto store = CheckpointStore::open(dir.file("db"));
  store->commit(42, checkpoint(42, 2, 10000));
  std::string bad = store->read(42, "tensor/1");
  bad[5000] ^= 0x01;
  store->overwrite_blob_for_testing(42, "tensor/1", bad);
  try {
    store->read(42, "tensor/1");
    FAIL() << "corruption not detected";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("checkpoint 42"), std::string::npos) << message;
    EXPECT_NE(message.find("tensor/1"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(store->read(42, "tensor/0"));  // the others are fine
}

TEST(CheckpointStore, CorruptBlobFileOnDiskIsAnErrorNamingStepAndBlob) {
  TempDir dir;
  const std::string big = content(5, "w", 1 << 20);
  {
    auto store = CheckpointStore::open(dir.file("db"));
    store->commit(5, {{"w", big}});
  }
  { auto store = CheckpointStore::open(dir.file("db")); }  // recovery flushes: blob files exist
  int corrupted = 0;
  for (const auto& entry : fs::directory_iterator(dir.file("db"))) {
    if (entry.path().extension() != ".blob") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(entry.path()) / 2));
    char c;
    f.read(&c, 1);
    c ^= 0x40;
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry.path()) / 2));
    f.write(&c, 1);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0) << "no blob file: blob storage is not enabled";
  auto store = CheckpointStore::open(dir.file("db"));
  try {
    store->read(5, "w");
    FAIL() << "corruption not detected";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("checkpoint 5 blob 'w'"), std::string::npos) << message;
  }
}

TEST(CheckpointStore, KeyValueFamilies) {
  TempDir dir;
  {
    auto store = CheckpointStore::open(dir.file("db"));
    store->put("state", "job/epoch", "3", true);
    store->write("state", {{"job/a", "1"}, {"job/b", "2"}, {"other", "x"}}, true);
    store->erase("state", "job/a");
    store->put("metrics", "job/epoch", "metric");
    EXPECT_THROW(store->put("checkpoints", "k", "v"), std::invalid_argument);
    EXPECT_THROW(store->get("nope", "k"), std::invalid_argument);
  }
  auto store = CheckpointStore::open(dir.file("db"));
  EXPECT_EQ(store->get("state", "job/epoch"), "3");
  EXPECT_EQ(store->get("metrics", "job/epoch"), "metric");
  EXPECT_FALSE(store->get("state", "job/a").has_value());
  const auto job = store->scan("state", "job/");
  ASSERT_EQ(job.size(), 2u);
  EXPECT_EQ(job[0], (std::pair<std::string, std::string>{"job/b", "2"}));
  EXPECT_EQ(job[1], (std::pair<std::string, std::string>{"job/epoch", "3"}));
  EXPECT_FALSE(store->latest().has_value());  // key/value writes are not checkpoints
}

TEST(CheckpointStore, BadArgumentsAreClearErrors) {
  TempDir dir;
  auto store = CheckpointStore::open(dir.file("db"));
  EXPECT_THROW(store->commit(-1, {{"a", "b"}}), std::invalid_argument);
  EXPECT_THROW(store->commit(1, {{"", "b"}}), std::invalid_argument);
  EXPECT_FALSE(store->latest().has_value());  // the failed commits left nothing
  EXPECT_THROW(CheckpointStore::open(""), std::invalid_argument);
  EXPECT_THROW(CheckpointStore::open("/proc/no/such/dir"), std::runtime_error);
}

}  // namespace
}  // namespace saccade::storage
