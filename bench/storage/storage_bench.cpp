// Commit and read throughput of CheckpointStore for a ViT-S-sized checkpoint:
// ~22M fp32 parameters x (student, teacher, Adam m, Adam v) ~ 350 MB, as 4 x
// 40 tensors of 2.2 MB. Run: bench_storage [--benchmark_min_time=...]
// (writes under $TMPDIR, removed at exit).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "storage/checkpoint_store.h"

namespace {

namespace fs = std::filesystem;
using saccade::storage::CheckpointStore;

std::map<std::string, std::string> vit_s_checkpoint() {
  std::map<std::string, std::string> blobs;
  std::mt19937_64 rng(1);
  for (const char* part : {"student", "teacher", "adam_m", "adam_v"}) {
    for (int i = 0; i < 40; ++i) {
      std::string bytes(2'200'000, '\0');
      for (size_t j = 0; j + 8 <= bytes.size(); j += 8) {
        const uint64_t v = rng();
        bytes.replace(j, 8, reinterpret_cast<const char*>(&v), 8);
      }
      blobs[std::string(part) + "/tensor" + std::to_string(i)] = std::move(bytes);
    }
  }
  return blobs;
}

int64_t total_bytes(const std::map<std::string, std::string>& blobs) {
  int64_t n = 0;
  for (const auto& [name, bytes] : blobs) n += static_cast<int64_t>(bytes.size());
  return n;
}

std::string temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "saccade-bench-store-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

void BM_CommitVitS(benchmark::State& state) {
  const bool sync = state.range(0) != 0;
  const auto blobs = vit_s_checkpoint();
  const std::string dir = temp_dir();
  {
    saccade::storage::StoreOptions options;
    options.sync_commits = sync;
    auto store = CheckpointStore::open(dir + "/db", options);
    int64_t step = 0;
    for (auto _ : state) {
      store->commit(++step, blobs, {{"step", std::to_string(step)}});
      state.PauseTiming();
      store->prune(2);  // bounded disk use, as a training run would
      state.ResumeTiming();
    }
  }
  fs::remove_all(dir);
  state.SetBytesProcessed(state.iterations() * total_bytes(blobs));
  state.counters["checkpoint_MB"] = static_cast<double>(total_bytes(blobs)) / 1e6;
}
BENCHMARK(BM_CommitVitS)
    ->Arg(1)
    ->Arg(0)
    ->ArgName("sync")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(4);

void BM_ReadAllVitS(benchmark::State& state) {
  const auto blobs = vit_s_checkpoint();
  const std::string dir = temp_dir();
  {
    auto store = CheckpointStore::open(dir + "/db");
    store->commit(1, blobs);
  }
  {
    auto store = CheckpointStore::open(dir + "/db");  // reopened: reads come from blob files
    for (auto _ : state) benchmark::DoNotOptimize(store->read_all(1));
  }
  fs::remove_all(dir);
  state.SetBytesProcessed(state.iterations() * total_bytes(blobs));
}
BENCHMARK(BM_ReadAllVitS)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(4);

}  // namespace

BENCHMARK_MAIN();
