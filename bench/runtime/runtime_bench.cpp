#include "bench/runtime/runtime_bench.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/data/generated_images.h"
#include "common/config.h"
#include "common/seconds_since.h"
#include "control/control.h"
#include "control/process.h"
#include "coordinator/status.h"
#include "dataloader/dataset_factory.h"
#include "dataloader/ssl_loader.h"
#include "dataloader/tar_pack.h"
#include "workers/data_plane/batch_client.h"
#include "workers/data_plane/batch_codec.h"
#include "workers/data_plane/data_actor.h"
#include "workers/job_options/data_options.h"

namespace saccade::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Prints the warning, error and critical lines of a failed run's log (the log of every
// process of the job), at most `limit` of them (the first and the last), each cut to 300
// bytes: where the bench runs on a machine whose files do not come back (a GPU lease), its
// output alone must say why a run failed.
void print_log_problems(const fs::path& log, size_t limit = 16) {
  std::ifstream in(log);
  std::vector<std::string> first;  // the first limit / 2 lines
  std::deque<std::string> last;    // the last lines after those
  size_t seen = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("] [warning] ") == std::string::npos &&
        line.find("] [error] ") == std::string::npos &&
        line.find("] [critical] ") == std::string::npos)
      continue;
    if (line.size() > 300) line = line.substr(0, 300) + "...";
    ++seen;
    if (first.size() < limit / 2) {
      first.push_back(std::move(line));
      continue;
    }
    last.push_back(std::move(line));
    if (last.size() > limit - limit / 2) last.pop_front();
  }
  if (seen == 0) {
    fmt::print("    {}: no warning or error logged\n", log.filename().string());
    return;
  }
  const size_t shown = first.size() + last.size();
  fmt::print(
      "    {}: {} warning/error line(s){}:\n", log.filename().string(), seen,
      seen > shown ? fmt::format(", the first {} and the last {}", first.size(), last.size()) : "");
  for (const std::string& line : first) fmt::print("      {}\n", line);
  if (seen > shown) fmt::print("      ...\n");
  for (const std::string& line : last) fmt::print("      {}\n", line);
}

// One line of a job's metrics.jsonl (common/metrics_log.h).
struct MetricsLine {
  double time = 0;
  int64_t step = 0;
  int64_t generation = 1;
  double data_wait_seconds = 0;  // the learner idle before this step's batch came
  double batch_bytes = 0;        // this step's batch on the wire
};

// The training steps of a metrics.jsonl (lines of other stages, or cut short, are skipped).
std::vector<MetricsLine> read_metrics(const fs::path& file) {
  std::vector<MetricsLine> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("time") || !j.contains("step") ||
        j.value("stage", "pretrain") != "pretrain")
      continue;
    auto number = [&](const char* key, double fallback) {
      return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
    };
    out.push_back({number("time", 0), static_cast<int64_t>(number("step", 0)),
                   static_cast<int64_t>(number("generation", 1)), number("data_wait_seconds", 0),
                   number("batch_bytes", 0)});
  }
  return out;
}

// The steady part of a run: from the first step past a quarter of it to the last one.
struct Steady {
  double images_per_second = 0;
  double data_wait_share = 0;  // of the steady wall time, the learner waiting for batches
  double wire_bytes_per_second = 0;
};

Steady steady_rates(const std::vector<MetricsLine>& lines, int64_t global_batch) {
  if (lines.size() < 2) return {};
  const int64_t warm = std::max<int64_t>(1, lines.back().step / 4);
  auto first = std::find_if(lines.begin(), lines.end(),
                            [&](const MetricsLine& l) { return l.step >= warm; });
  const MetricsLine& last = lines.back();
  if (first == lines.end() || last.time <= first->time) return {};
  const double span = last.time - first->time;
  double wait = 0, bytes = 0;  // of the steps after `first` (its own batch came before the span)
  for (auto l = std::next(first); l != lines.end(); ++l) {
    wait += l->data_wait_seconds;
    bytes += l->batch_bytes;
  }
  return {static_cast<double>((last.step - first->step) * global_batch) / span, wait / span,
          bytes / span};
}

// CPU seconds (user + system) of this process's waited-for descendants so far.
double children_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// A child saccade process writing to its own log file.
class Job {
 public:
  Job(const std::vector<std::string>& argv, const fs::path& log) {
    // The child inherits stdout/stderr at fork time: point them at the log around the spawn.
    std::fflush(stdout);
    std::fflush(stderr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int out = ::dup(STDOUT_FILENO), err = ::dup(STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    const control::Spawned s = control::spawn_process(argv);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    for (int f : {fd, out, err}) ::close(f);
    if (s.pid < 0) throw std::runtime_error(s.error);
    pid_ = s.pid;
  }
  ~Job() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Exit code (128 + signal), or -1 after `timeout` (then the group is killed).
  int wait(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

struct Variant {
  std::string name;
  std::string command;  // "pretrain" or "run"
  int64_t data_actors = 1;
  int64_t learners = 1;
  int64_t batch = 0;  // global
  int64_t steps = 0;
  int64_t checkpoint_every = 0;
  bool feed = false;  // a feed run: one loader thread per data actor, the learner on the device
};

class RuntimeBench {
 public:
  explicit RuntimeBench(const RuntimeBenchOptions& options)
      : options_(options), base_(load_config(options.config_path)) {
    root_ = options.work_root.empty()
                ? fs::temp_directory_path() / fmt::format("saccade-bench-runtime-{}", ::getpid())
                : fs::path(options.work_root);
    fs::create_directories(root_);
    threads_ = job_options::resolve_threads(base_.ssl.threads);
  }

  int run() {
    const int64_t b = base_.ssl.batch_size;
    fmt::print("saccade bench runtime: {} (batch b = {}, {} steps per run, {} trainer threads)\n",
               options_.config_path, b, options_.steps, threads_);
    fmt::print("work dirs and logs: {}\n\n", root_.string());
    if (options_.throughput) {
      fmt::print("{:<34} {:>9} {:>7} {:>8} {:>10}\n", "run", "learners", "batch", "threads",
                 "images/s");
      const int64_t n = options_.steps;
      throughput({"pretrain (one process)", "pretrain", 0, 1, b, n, n});
      throughput({"run, 1 learner x b", "run", 1, 1, b, n, n});
      throughput({"run, 1 learner x 2b", "run", 2, 1, 2 * b, n, n});
      throughput({"run, 2 learners x b", "run", 2, 2, 2 * b, n, n});
      report_ratios();
    }
    if (options_.recovery) recovery();
    if (options_.data_path) data_path();
    if (!options_.feed_actors.empty()) feed();
    write_json();
    return failures_ == 0 ? 0 : 1;
  }

 private:
  fs::path write_variant(const Variant& v) {
    JobConfig c = base_;
    c.job.name = "bench-" + slug(v.name);
    c.job.work_dir = (root_ / slug(v.name)).string();
    c.job.stages = {"pretrain"};
    fs::remove_all(c.job.work_dir);
    if (v.command == "run") {
      NodeSpec node;
      node.name = "local";
      node.host = "127.0.0.1";
      node.data_actors = v.data_actors;
      node.learners = v.learners;
      if (v.feed && options_.device != "cpu") node.gpus = 1;
      c.cluster.nodes = {node};
    }
    if (v.feed) {
      c.data.loader_threads = 1;  // one core per data actor
      c.ssl.knn_every_steps = 0;  // nothing but training in the timed steps
      if (!feed_shards_.empty()) {
        c.data.dataset = "shards";
        c.data.shards = feed_shards_.string();
        c.data.channels = 3;
      }
      // Frames as large as the learner's batch needs (with views.cut_on = "learner" the
      // bound is images at views.ship_max_side): a cluster raises cluster.max_message_bytes
      // the same way, as `saccade run` refuses a config whose batches do not fit.
      const size_t frame = data_plane::batch_frame_bytes(
          job_options::view_options(c), v.batch / std::max<int64_t>(1, v.learners));
      c.cluster.max_message_bytes =
          std::max(c.cluster.max_message_bytes, static_cast<int64_t>(frame));
    }
    c.ssl.batch_size = v.batch;
    c.ssl.epochs = 1;
    c.ssl.steps_per_epoch = v.steps;
    c.ssl.checkpoint_every_steps = v.checkpoint_every;
    c.ssl.threads = std::max(1, threads_ / static_cast<int>(v.learners));
    c.logging.progress = false;
    c.cluster.status_linger_ms = 0;
    const fs::path file = root_ / (slug(v.name) + ".toml");
    std::ofstream(file) << to_toml(c);
    load_config(file);  // refuses a variant the runtime would refuse
    return file;
  }

  static std::string slug(const std::string& name) {
    std::string s;
    for (char ch : name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
    return s;
  }

  std::unique_ptr<Job> start(const Variant& v, const fs::path& config) {
    std::vector<std::string> argv = {control::self_executable(), v.command, config.string()};
    if (v.command == "pretrain") argv.push_back("--fresh");
    return std::make_unique<Job>(argv, root_ / (slug(v.name) + ".log"));
  }

  void throughput(const Variant& v) {
    const fs::path config = write_variant(v);
    const auto t0 = Clock::now();
    const int code = start(v, config)->wait(std::chrono::seconds(options_.run_timeout_s));
    const double wall = seconds_since(t0);
    const JobConfig c = load_config(config);
    const double ips =
        steady_rates(read_metrics(fs::path(c.job.work_dir) / c.logging.metrics_file), v.batch)
            .images_per_second;
    if (code != 0) ++failures_;
    fmt::print("{:<34} {:>9} {:>7} {:>8} {:>10}{}\n", v.name, v.learners,
               v.learners > 1 ? fmt::format("{}x{}", v.learners, v.batch / v.learners)
                              : std::to_string(v.batch),
               c.ssl.threads, code == 0 ? fmt::format("{:.1f}", ips) : "-",
               code == 0 ? fmt::format("   ({:.1f} s wall)", wall)
                         : fmt::format("   exit {}: see {}", code, slug(v.name) + ".log"));
    if (code != 0) print_log_problems(root_ / (slug(v.name) + ".log"));
    results_.push_back({v, ips, wall, code});
  }

  void report_ratios() {
    auto ips = [&](size_t i) { return i < results_.size() ? results_[i].images_per_second : 0.0; };
    if (ips(0) > 0 && ips(1) > 0)
      fmt::print("orchestration overhead, run 1 learner vs pretrain: {:+.1f}%\n",
                 100 * (1 - ips(1) / ips(0)));
    if (ips(2) > 0 && ips(3) > 0)
      fmt::print("2 learners x b vs 1 learner x 2b: {:.2f}x the images/s\n", ips(3) / ips(2));
    fmt::print("\n");
  }

  // Kills learner 1 of a 2-learner job a third of the way in.
  void recovery() {
    const int64_t n = std::max<int64_t>(options_.steps, 24);
    const Variant v{"recovery, 2 learners x b", "run", 2,    2,
                    2 * base_.ssl.batch_size,   2 * n, n / 4};
    const fs::path file = write_variant(v);
    const JobConfig c = load_config(file);
    auto job = start(v, file);
    const std::string endpoint = control::tcp_endpoint(
        fmt::format("127.0.0.1:{}", c.cluster.coordinator_port), "coordinator");
    const control::Security security = control::load_security(c.security, false);
    auto status = [&]() {
      std::string why;
      return coordinator::query_status(endpoint, c, security, std::chrono::milliseconds(500), why);
    };
    auto learner = [](const coordinator::JobStatus& s, int rank) -> const coordinator::ActorRow* {
      for (const auto& a : s.actors)
        if (a.role == "learner" && a.rank == rank) return &a;
      return nullptr;
    };
    std::optional<coordinator::JobStatus> s;
    const auto deadline = Clock::now() + std::chrono::seconds(900);
    while (Clock::now() < deadline) {
      s = status();
      if (s && learner(*s, 0) && learner(*s, 1) && learner(*s, 0)->step >= n / 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const coordinator::ActorRow* victim = s ? learner(*s, 1) : nullptr;
    if (!victim || victim->pid == 0) {
      fmt::print("recovery: the job never reached step {} (see {}.log)\n\n", n / 2, slug(v.name));
      ++failures_;
      return;
    }
    const int64_t killed_at = learner(*s, 0)->step;
    const uint64_t generation = s->generation;
    const double t_kill = unix_seconds();
    const auto kill_time = Clock::now();
    ::kill(static_cast<pid_t>(victim->pid), SIGKILL);
    double to_generation = -1;
    while (seconds_since(kill_time) < 120) {
      s = status();
      if (s && s->generation > generation) {
        to_generation = seconds_since(kill_time);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int code = job->wait(std::chrono::seconds(options_.run_timeout_s));
    double to_training = -1;
    int64_t resumed_from = -1;
    for (const MetricsLine& l : read_metrics(fs::path(c.job.work_dir) / c.logging.metrics_file)) {
      if (l.generation > static_cast<int64_t>(generation)) {
        to_training = l.time - t_kill;
        resumed_from = l.step - 1;
        break;
      }
    }
    if (code != 0 || to_training < 0) ++failures_;
    recovery_ = {killed_at, resumed_from, to_generation, to_training, code};
    fmt::print(
        "recovery (kill -9 learner 1 at step {}): new generation after {:.2f} s, first step of it "
        "after {:.2f} s (resumed from checkpoint {}, checkpoints every {} steps); job exit {}\n\n",
        killed_at, to_generation, to_training, resumed_from, v.checkpoint_every, code);
  }

  // Remote data actors (threads serving on loopback) vs the local loader.
  void data_path() {
    const auto dataset = data::make_dataset(job_options::dataset_spec(base_, false));
    const data::ViewOptions views = job_options::view_options(base_);
    const int64_t batch = base_.ssl.batch_size;
    const int threads = static_cast<int>(base_.data.loader_threads);
    const int depth = static_cast<int>(base_.data.queue_depth);
    const data::ShardOptions shard{dataset->size(), 1, 0, 1, true, false};
    const uint64_t seed = job_options::view_seed_root(base_);
    const int n = options_.data_batches;
    const size_t frame = data_plane::batch_frame_bytes(views, batch);

    data::SslLoader local(dataset, shard, {0, 0}, views, {batch, threads, depth, seed});
    local.next();  // warm-up
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) local.next();
    const double local_rate = n / seconds_since(t0);

    // ipc: learners on the data actors' node (what placement picks there).
    const std::string ipc_dir =
        (std::filesystem::temp_directory_path() / fmt::format("saccade-bench-{}", ::getpid()))
            .string();
    auto remote = [&](int servers, int in_flight, std::vector<double>* latencies, bool ipc) {
      std::atomic<bool> stop{false};
      std::vector<std::unique_ptr<data_plane::BatchServer>> running;
      std::vector<std::thread> loops;
      data_plane::RemoteSourceOptions o;
      for (int i = 0; i < servers; ++i) {
        data_plane::BatchServerOptions so;
        so.endpoint = "tcp://127.0.0.1:*";
        if (ipc) so.local_endpoint = fmt::format("ipc://{}/data-{}", ipc_dir, i);
        so.sender = {"bench", wire::Role::DATA, i, "local"};
        so.expect = {"bench", static_cast<size_t>(base_.cluster.max_message_bytes)};
        so.threads = threads;
        running.push_back(std::make_unique<data_plane::BatchServer>(dataset, views, so));
        o.endpoints.push_back(ipc ? running.back()->local_endpoint() : running.back()->endpoint());
      }
      for (auto& s : running)
        loops.emplace_back([&stop, &s] { s->serve([&] { return stop.load(); }); });
      o.shard = shard;
      o.views = views;
      o.batch_size = batch;
      o.seed = seed;
      o.queue_depth = in_flight;
      o.sender = {"bench", wire::Role::LEARNER, 0, "local"};
      o.expect = {"bench", static_cast<size_t>(base_.cluster.max_message_bytes)};
      auto never = [] { return false; };
      double rate = 0;
      {
        data_plane::RemoteBatchSource source(o, {0, 0});
        source.next(never);  // connect + warm-up
        const auto start = Clock::now();
        for (int i = 0; i < n; ++i) {
          const auto t = Clock::now();
          source.next(never);
          if (latencies) latencies->push_back(seconds_since(t) * 1e3);
        }
        rate = n / seconds_since(start);
      }
      stop = true;
      for (auto& t : loops) t.join();
      return rate;
    };
    auto percentile = [](std::vector<double> v, int pct) {
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, v.size() * static_cast<size_t>(pct) / 100)];
    };
    std::vector<double> latencies, ipc_latencies;
    const double one = remote(1, depth, nullptr, false);
    const double one_ipc = remote(1, depth, nullptr, true);
    const double two = remote(2, depth, nullptr, false);
    const double serial = remote(1, 1, &latencies, false);
    remote(1, 1, &ipc_latencies, true);
    std::filesystem::remove_all(ipc_dir);
    const double p50 = percentile(latencies, 50), p99 = percentile(latencies, 99);
    const double ipc_p50 = percentile(ipc_latencies, 50), ipc_p99 = percentile(ipc_latencies, 99);
    data_ = {local_rate, one, one_ipc, two,     serial,
             p50,        p99, ipc_p50, ipc_p99, static_cast<double>(frame)};
    fmt::print(
        "data path ({} images/batch, {:.2f} MB/frame, {} cutting thread(s) per actor, "
        "queue depth {}):\n",
        batch, frame / 1e6, threads, depth);
    fmt::print("  local loader (in process)       {:8.1f} batches/s  {:8.1f} images/s\n",
               local_rate, local_rate * batch);
    fmt::print(
        "  1 data actor over tcp loopback  {:8.1f} batches/s  {:8.1f} images/s  {:6.1f} MB/s\n",
        one, one * batch, one * frame / 1e6);
    fmt::print(
        "  1 data actor over ipc (same node){:7.1f} batches/s  {:8.1f} images/s  {:6.1f} MB/s\n",
        one_ipc, one_ipc * batch, one_ipc * frame / 1e6);
    fmt::print(
        "  2 data actors over tcp loopback {:8.1f} batches/s  {:8.1f} images/s  {:6.1f} MB/s\n",
        two, two * batch, two * frame / 1e6);
    fmt::print(
        "  one request in flight: {:.1f} batches/s, latency p50 {:.2f} ms, p99 {:.2f} ms over tcp, "
        "p50 {:.2f} ms, p99 {:.2f} ms over ipc (local cut: {:.2f} ms/batch)\n\n",
        serial, p50, p99, ipc_p50, ipc_p99, 1e3 / local_rate);
  }

  // One learner on the device fed by 1, 2, 4, ... data actors, against the same trainer fed
  // from memory.
  void feed() {
    const int64_t b = base_.ssl.batch_size, n = options_.steps;
    if (options_.feed_images > 0) {
      // ImageNet-size JPEGs (ImageNet's median is about 500 x 375), packed as a cluster
      // would read them: tar shards through their byte-offset index.
      const fs::path folder = root_ / "feed-images";
      feed_shards_ = root_ / "feed-shards";
      fs::remove_all(folder);
      fs::remove_all(feed_shards_);
      write_generated_folder(folder, options_.feed_images, /*classes=*/10, 500, 375);
      data::PackOptions pack;
      pack.folder = folder.string();
      pack.out = feed_shards_.string();
      pack.shard_size = 500;
      const data::PackResult packed = data::pack_image_folder(pack);
      fs::remove_all(folder);
      fmt::print("feed: {} generated 500 x 375 JPEGs in {} shard(s), {:.1f} KB per image\n",
                 packed.samples, packed.shards.size(),
                 static_cast<double>(packed.bytes) / 1e3 / static_cast<double>(packed.samples));
    }
    // The same trainer fed from memory: saccade bench step of the first feed run's config.
    const Variant memory{"feed, from memory", "bench step", 0, 1, b, n, n, true};
    const fs::path memory_config = write_variant(memory);
    const fs::path memory_json = root_ / "feed-memory.json";
    fs::remove(memory_json);
    const std::vector<std::string> argv = {control::self_executable(),
                                           "bench",
                                           "step",
                                           memory_config.string(),
                                           "--device",
                                           options_.device,
                                           "--batch",
                                           std::to_string(b),
                                           "--warmup",
                                           "3",
                                           "--steps",
                                           std::to_string(std::max<int64_t>(5, n / 2)),
                                           "--json",
                                           memory_json.string()};
    const int code = Job(argv, root_ / "feed-from-memory.log")
                         .wait(std::chrono::seconds(options_.run_timeout_s));
    double memory_rate = 0;
    if (code == 0) {
      const auto j = nlohmann::json::parse(std::ifstream(memory_json), nullptr, false);
      if (j.is_object() && j.contains("rows") && !j["rows"].empty())
        memory_rate = j["rows"][0].value("images_per_second", 0.0);
    }
    if (memory_rate <= 0) ++failures_;
    feed_memory_ = memory_rate;
    fmt::print(
        "feed: one learner on {}, batch {}, views cut on the {}; from memory (saccade bench "
        "step): {}\n",
        options_.device, b, base_.views.cut_on,
        memory_rate > 0 ? fmt::format("{:.1f} images/s", memory_rate)
                        : fmt::format("failed (exit {}): see feed-from-memory.log", code));
    if (memory_rate <= 0) print_log_problems(root_ / "feed-from-memory.log");
    fmt::print("{:>12} {:>10} {:>11} {:>10} {:>9} {:>11}\n", "data actors", "images/s", "of memory",
               "data wait", "wire MB/s", "host cores");
    for (const int64_t actors : options_.feed_actors) {
      const Variant v{fmt::format("feed, {} data actors", actors), "run", actors, 1, b, n, n, true};
      const fs::path config = write_variant(v);
      const double cpu_before = children_cpu_seconds();
      const auto t0 = Clock::now();
      const int exit = start(v, config)->wait(std::chrono::seconds(options_.run_timeout_s));
      const double wall = seconds_since(t0);
      const double cores = (children_cpu_seconds() - cpu_before) / std::max(wall, 1e-9);
      const JobConfig c = load_config(config);
      const Steady s =
          steady_rates(read_metrics(fs::path(c.job.work_dir) / c.logging.metrics_file), b);
      if (exit != 0 || s.images_per_second <= 0) ++failures_;
      const double share = memory_rate > 0 ? s.images_per_second / memory_rate : 0;
      fmt::print("{:>12} {:>10.1f} {:>10.0f}% {:>9.1f}% {:>9.1f} {:>11.2f}{}\n", actors,
                 s.images_per_second, 100 * share, 100 * s.data_wait_share,
                 s.wire_bytes_per_second / 1e6, cores,
                 exit == 0 ? "" : fmt::format("   exit {}: see {}.log", exit, slug(v.name)));
      if (exit != 0) print_log_problems(root_ / (slug(v.name) + ".log"));
      feed_.push_back({actors, s, share, cores, wall, exit});
      // A call its time limit stops keeps the runs that finished (a GPU lease is short).
      write_json(/*announce=*/false);
    }
    fmt::print(
        "(host cores: CPU seconds of all the job's processes over its wall time, start-up "
        "included; data wait: the learner's share of steady wall time spent waiting)\n\n");
  }

  // `announce`: say where the figures went (once, at the end).
  void write_json(bool announce = true) const {
    if (options_.json_path.empty()) return;
    nlohmann::json runs = nlohmann::json::array();
    for (const Result& r : results_)
      runs.push_back({{"run", r.variant.name},
                      {"command", r.variant.command},
                      {"learners", r.variant.learners},
                      {"data_actors", r.variant.data_actors},
                      {"global_batch", r.variant.batch},
                      {"steps", r.variant.steps},
                      {"images_per_second", r.images_per_second},
                      {"wall_s", r.wall_s},
                      {"exit", r.exit_code}});
    nlohmann::json feed = nlohmann::json::array();
    for (const FeedRow& r : feed_)
      feed.push_back({{"data_actors", r.data_actors},
                      {"images_per_second", r.rates.images_per_second},
                      {"of_memory_fed", r.of_memory},
                      {"data_wait_share", r.rates.data_wait_share},
                      {"wire_bytes_per_second", r.rates.wire_bytes_per_second},
                      {"host_cores", r.host_cores},
                      {"wall_s", r.wall_s},
                      {"exit", r.exit_code}});
    const nlohmann::json out = {{"config", options_.config_path},
                                {"feed",
                                 {{"device", options_.device},
                                  {"batch", base_.ssl.batch_size},
                                  {"cut_on", base_.views.cut_on},
                                  {"memory_fed_images_per_second", feed_memory_},
                                  {"runs", feed}}},
                                {"throughput", runs},
                                {"recovery",
                                 {{"killed_at_step", recovery_.killed_at},
                                  {"resumed_from_step", recovery_.resumed_from},
                                  {"new_generation_s", recovery_.to_generation},
                                  {"training_again_s", recovery_.to_training},
                                  {"exit", recovery_.exit_code}}},
                                {"data_path",
                                 {{"local_batches_per_s", data_.local},
                                  {"one_actor_batches_per_s", data_.one},
                                  {"one_actor_ipc_batches_per_s", data_.one_ipc},
                                  {"two_actors_batches_per_s", data_.two},
                                  {"serial_batches_per_s", data_.serial},
                                  {"latency_p50_ms", data_.p50},
                                  {"latency_p99_ms", data_.p99},
                                  {"ipc_latency_p50_ms", data_.ipc_p50},
                                  {"ipc_latency_p99_ms", data_.ipc_p99},
                                  {"frame_bytes", data_.frame_bytes}}}};
    std::ofstream file(options_.json_path);
    file << out.dump(2) << "\n";
    if (!file.flush()) {
      fmt::print(stderr, "cannot write {}\n", options_.json_path);
      return;
    }
    if (announce) fmt::print("figures written to {}\n", options_.json_path);
  }

  struct Result {
    Variant variant;
    double images_per_second = 0;
    double wall_s = 0;
    int exit_code = 0;
  };
  struct Recovery {
    int64_t killed_at = -1, resumed_from = -1;
    double to_generation = -1, to_training = -1;
    int exit_code = -1;
  };
  struct FeedRow {
    int64_t data_actors = 0;
    Steady rates;
    double of_memory = 0;  // images/s over the memory-fed trainer's
    double host_cores = 0;
    double wall_s = 0;
    int exit_code = -1;
  };
  struct DataPath {
    double local = 0, one = 0, one_ipc = 0, two = 0, serial = 0;
    double p50 = 0, p99 = 0, ipc_p50 = 0, ipc_p99 = 0, frame_bytes = 0;
  };

  RuntimeBenchOptions options_;
  JobConfig base_;
  fs::path root_;
  int threads_ = 1;
  int failures_ = 0;
  std::vector<Result> results_;
  Recovery recovery_;
  DataPath data_;
  fs::path feed_shards_;  // the feed runs' generated shards; empty = the config's data
  double feed_memory_ = 0;
  std::vector<FeedRow> feed_;
};

}  // namespace

int run_runtime_bench(const RuntimeBenchOptions& options) {
  return RuntimeBench(options).run();
}

}  // namespace saccade::bench
