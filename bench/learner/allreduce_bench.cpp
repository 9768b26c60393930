#include "bench/learner/allreduce_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "common/seconds_since.h"
#include "control/process.h"
#include "workers/learner/learner_group.h"

namespace saccade::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> rank_argv(const AllreduceBenchOptions& o, int rank) {
  const std::string sizes = fmt::format("{}", fmt::join(o.megabytes, ","));
  std::vector<std::string> argv = {control::self_executable(),
                                   "bench",
                                   "allreduce",
                                   "--rank",
                                   std::to_string(rank),
                                   "--world-size",
                                   std::to_string(o.world_size),
                                   "--device",
                                   o.device,
                                   "--megabytes",
                                   sizes,
                                   "--iterations",
                                   std::to_string(o.iterations),
                                   "--store-host",
                                   o.store_host,
                                   "--store-port",
                                   std::to_string(o.store_port),
                                   "--timeout",
                                   std::to_string(o.timeout_s)};
  if (rank == 0 && !o.json_path.empty()) {
    argv.push_back("--json");
    argv.push_back(o.json_path);
  }
  return argv;
}

// Starts every rank and reaps them all; the first failure (or the timeout) stops the rest.
int launch(const AllreduceBenchOptions& o) {
  std::vector<pid_t> pids;
  for (int r = 0; r < o.world_size; ++r) {
    const control::Spawned s = control::spawn_process(rank_argv(o, r));
    if (s.pid < 0) {
      std::fprintf(stderr, "saccade bench allreduce: rank %d: %s\n", r, s.error.c_str());
      for (pid_t p : pids) kill(-p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(s.pid);
  }
  const auto start = Clock::now();
  int failed = 0, running = o.world_size;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (auto& p : pids)
        if (p == pid) {
          p = -1;
          --running;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
        }
      if (failed > 0)
        for (pid_t p : pids)
          if (p > 0) kill(-p, SIGKILL);
      continue;
    }
    if (seconds_since(start) > o.timeout_s + 30) {
      std::fprintf(stderr, "saccade bench allreduce: ranks still running after %d s; killed\n",
                   o.timeout_s + 30);
      for (pid_t p : pids)
        if (p > 0) kill(-p, SIGKILL);
      ++failed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failed > 0)
    std::fprintf(stderr, "saccade bench allreduce: %d of %d ranks failed\n", failed, o.world_size);
  return failed > 0 ? 1 : 0;
}

int run_rank(const AllreduceBenchOptions& o) {
  std::string device = "cpu";
  if (o.device == "cuda") {
    const int devices = static_cast<int>(torch::cuda::device_count());
    if (devices == 0) throw std::runtime_error("--device cuda: no CUDA device is visible");
    device = "cuda:" + std::to_string(o.rank % devices);
  } else if (o.device != "cpu") {
    throw std::invalid_argument("--device: expected cpu or cuda, got \"" + o.device + "\"");
  }
  const std::chrono::milliseconds timeout(o.timeout_s * 1000LL);
  std::unique_ptr<learner::StoreServer> server;
  if (o.rank == 0)
    server = std::make_unique<learner::StoreServer>(
        o.store_host, static_cast<uint16_t>(o.store_port), o.world_size, timeout);
  learner::LearnerGroupOptions go;
  go.store_host = o.store_host;
  go.store_port = static_cast<uint16_t>(o.store_port);
  go.rank = o.rank;
  go.world_size = o.world_size;
  go.timeout = timeout;
  go.device = device;
  go.local_host = o.store_host;
  auto group = learner::LearnerGroup::join(go, server.get());
  const bool cuda = device != "cpu";
  const auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  nlohmann::json rows = nlohmann::json::array();
  const double n = o.world_size;
  if (o.rank == 0)
    std::printf("all-reduce over %d processes, %s (%s)\n%12s %12s %14s %14s\n", o.world_size,
                group->backend(), device.c_str(), "MB", "ms", "algbw GB/s", "busbw GB/s");
  for (double mb : o.megabytes) {
    const int64_t numel = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20) / 4));
    at::Tensor t = torch::full({numel}, static_cast<float>(o.rank + 1),
                               torch::TensorOptions().device(device).dtype(torch::kFloat32));
    group->all_reduce_sum(t);  // warm-up, and the check: every element is 1 + ... + N
    sync();
    const float expected = static_cast<float>(n * (n + 1) / 2);
    const float lo = t.min().item<float>(), hi = t.max().item<float>();
    if (lo != expected || hi != expected)
      throw std::runtime_error(fmt::format(
          "all-reduce of {} MB: expected every element {}, got {}..{}", mb, expected, lo, hi));
    t.fill_(1.0f / static_cast<float>(o.world_size));  // sums stay 1: no overflow
    group->all_reduce_sum(t);
    sync();
    group->barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iterations; ++i) group->all_reduce_sum(t);
    sync();
    const double seconds = seconds_since(t0) / std::max(1, o.iterations);
    const double bytes = static_cast<double>(numel) * 4;
    const double algbw = bytes / seconds / 1e9, busbw = algbw * 2 * (n - 1) / n;
    if (o.rank == 0) std::printf("%12.2f %12.3f %14.2f %14.2f\n", mb, seconds * 1e3, algbw, busbw);
    rows.push_back(
        {{"megabytes", mb}, {"ms", seconds * 1e3}, {"algbw_gb_s", algbw}, {"busbw_gb_s", busbw}});
  }
  group->barrier();
  if (o.rank == 0 && !o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << nlohmann::json{{"world_size", o.world_size},
                        {"backend", group->backend()},
                        {"device", o.device},
                        {"checked", true},
                        {"rows", rows}}
             .dump(2)
      << "\n";
    if (!f) throw std::runtime_error("cannot write " + o.json_path);
  }
  return 0;
}

}  // namespace

int run_allreduce_bench(const AllreduceBenchOptions& o) {
  if (o.world_size < 1) throw std::invalid_argument("--world-size must be >= 1");
  if (o.rank < 0) return launch(o);
  if (o.rank >= o.world_size)
    throw std::invalid_argument(
        fmt::format("--rank {} outside --world-size {}", o.rank, o.world_size));
  return run_rank(o);
}

}  // namespace saccade::bench
