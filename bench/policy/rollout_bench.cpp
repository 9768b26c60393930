#include "bench/policy/rollout_bench.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

#include <opencv2/core.hpp>

#include "common/config.h"
#include "common/seconds_since.h"
#include "model/policy.h"
#include "model/weights.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/policy/policy_stage.h"
#include "workers/policy/rollout_client.h"
#include "workers/policy/rollout_server.h"
#include "workers/policy/rollout_source.h"
#include "workers/teacher/teacher_backbone.h"

// OpenBLAS's thread pool is one per process; the actors here are threads of
// one process (a job's are processes with a pool each), so each BLAS call is
// made to run on its calling actor's thread. Weak: absent with another BLAS.
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

namespace saccade::bench {
namespace {

using policy::Traces;
constexpr const char* kJob = "rollout-bench";
constexpr int64_t kImages = 512;  // noise images the batches draw from
constexpr int64_t kClasses = 10;

// Noise images of the config's channels, labels i % 10: what the backbone
// reads does not change its cost.
class NoiseImages final : public data::Dataset {
 public:
  NoiseImages(int64_t count, int side, int channels) : channels_(channels) {
    cv::RNG rng(7);
    for (int64_t i = 0; i < count; ++i) {
      cv::Mat image(side, side, channels == 3 ? CV_8UC3 : CV_8UC1);
      rng.fill(image, cv::RNG::UNIFORM, 0, 256);
      images_.push_back(image);
    }
  }
  int64_t size() const override { return static_cast<int64_t>(images_.size()); }
  int64_t num_classes() const override { return kClasses; }
  int channels() const override { return channels_; }
  std::optional<data::Sample> get(int64_t i) const override {
    return data::Sample{images_.at(static_cast<size_t>(i)).clone(), i % kClasses, "noise"};
  }
  const data::DatasetStats& stats() const override { return stats_; }

 private:
  int channels_;
  std::vector<cv::Mat> images_;
  data::DatasetStats stats_;
};

// A backbone whose cost is a sleep of trace_ms per trace; the traces it
// returns have the real shapes (so the codec and transfer are the real ones).
class SimulatedRollouts : public policy::RolloutSource {
 public:
  SimulatedRollouts(double trace_ms, int64_t n_state, int64_t width)
      : trace_ms_(trace_ms), n_state_(n_state), width_(width) {}
  Traces run(model::GazePolicyImpl*, const policy::RolloutBatch& batch) override {
    const int64_t n = static_cast<int64_t>(batch.indices.size()) * batch.trace.group;
    const int64_t t = batch.trace.steps;
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<int64_t>(1e3 * trace_ms_ * static_cast<double>(n))));
    Traces tr;
    tr.states = torch::zeros({t, n, n_state_, width_});
    tr.extent = torch::ones({n, 2});
    tr.gazes = torch::full({t, n, 2}, 0.5);
    tr.log_prob = torch::zeros({t, n});
    tr.rewards = torch::full({t, n}, 0.1);
    tr.correct = torch::zeros({t, n}, torch::kBool);
    return tr;
  }

 private:
  double trace_ms_;
  int64_t n_state_, width_;
};

// One rollout actor on a thread of this process, with its own backbone copy.
class ActorThread {
 public:
  ActorThread(const std::string& backbone_bytes, const probe::TaskHead& head,
              const model::PolicyOptions& policy, std::shared_ptr<const data::Dataset> images,
              const data::ViewOptions& views, std::shared_ptr<policy::RolloutSource> simulated,
              int torch_threads, int rank)
      : backbone_(model::import_backbone(backbone_bytes)) {
    policy::RolloutServerOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.sender = {kJob, wire::Role::ROLLOUT, rank, "bench"};
    o.expect = {kJob, 256 << 20};
    o.source = std::move(simulated);
    server_ = std::make_unique<policy::RolloutServer>(*backbone_, head, policy, std::move(images),
                                                      views, o);
    thread_ = std::thread([this, torch_threads] {
      at::set_num_threads(torch_threads);
      server_->serve([this] { return stop_.load(); });
    });
  }
  ~ActorThread() {
    stop_ = true;
    thread_.join();
  }
  std::string endpoint() const { return server_->endpoint(); }

 private:
  model::FovealBackbone backbone_;
  std::unique_ptr<policy::RolloutServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Row {
  int actors = 0;
  double seconds_per_batch = 0, traces_per_second = 0, speedup = 0, of_linear = 0;
};

}  // namespace

int run_rollout_bench(const RolloutBenchOptions& o) {
  try {
    const JobConfig config = load_config(o.config_path);
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    const std::string backbone_bytes = teacher::initial_backbone(config);
    const model::FovealBackbone probe_shape = model::import_backbone(backbone_bytes);
    const model::BackboneOptions& bo = probe_shape->options();
    const model::PolicyOptions po = job_options::policy_options_for(config, bo);
    torch::manual_seed(1);
    const probe::TaskHead head{torch::randn({kClasses, bo.width}) * 0.1, torch::zeros({kClasses})};
    const data::ViewOptions views = job_options::view_options(config);
    const int side = std::max(28, 2 * views.patch_size);
    auto images = std::make_shared<NoiseImages>(kImages, side, views.channels);
    const int64_t batch_images = o.batch_images > 0 ? o.batch_images : config.policy.batch_size;
    const int64_t group = config.policy.group_size, steps = config.policy.steps;
    model::GazePolicy policy(po);
    fmt::print(
        "rollouts of {} images x {} traces x {} glimpses per batch, a new policy version "
        "(weights {} KB to every actor) per batch; backbone: {}\n",
        batch_images, group, steps, model::save_modules({{"", policy.get()}}).size() / 1024,
        o.trace_ms > 0 ? fmt::format("simulated, {} ms per trace", o.trace_ms)
                       : fmt::format("{} (depth {}, width {}), {} torch thread(s) per actor",
                                     config.job.name, bo.depth, bo.width, o.threads_per_actor));
    fmt::print("{:>7}{:>14}{:>12}{:>10}{:>11}\n", "actors", "s per batch", "traces/s", "speed-up",
               "of linear");
    std::vector<Row> rows;
    for (const int n : o.actors) {
      std::vector<std::unique_ptr<ActorThread>> actors;
      std::vector<std::string> endpoints;
      for (int r = 0; r < n; ++r) {
        auto simulated = o.trace_ms > 0
                             ? std::make_shared<SimulatedRollouts>(o.trace_ms, bo.n_state, bo.width)
                             : nullptr;
        actors.push_back(std::make_unique<ActorThread>(backbone_bytes, head, po, images, views,
                                                       simulated, o.threads_per_actor, r));
        endpoints.push_back(actors.back()->endpoint());
      }
      policy::RolloutClientOptions co;
      co.endpoints = endpoints;
      co.n_state = bo.n_state;
      co.width = bo.width;
      co.request_timeout = std::chrono::milliseconds(120000);
      co.sender = {kJob, wire::Role::LEARNER, 0, "bench"};
      co.expect = {kJob, 256 << 20};
      policy::RolloutClient client(co);
      auto batch_at = [&](int64_t u) {
        policy::RolloutBatch b;
        b.policy_version = static_cast<uint64_t>(u);
        for (int64_t i = 0; i < batch_images; ++i) {
          b.indices.push_back((u * batch_images + i) % kImages);
          b.trace.image_seeds.push_back(static_cast<uint64_t>(u * 100003 + i));
        }
        b.trace.steps = steps;
        b.trace.group = group;
        b.trace.source = policy::GazeSource::kPolicySample;
        b.trace.std = 0.1;
        return b;
      };
      client.run(policy.get(), batch_at(0));  // connections and first weights
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t u = 1; u <= o.batches; ++u) client.run(policy.get(), batch_at(u));
      Row row;
      row.actors = n;
      row.seconds_per_batch = seconds_since(t0) / static_cast<double>(o.batches);
      row.traces_per_second =
          static_cast<double>(batch_images * group) / std::max(row.seconds_per_batch, 1e-9);
      const double one = rows.empty() ? row.traces_per_second / n
                                      : rows.front().traces_per_second / rows.front().actors;
      row.speedup = row.traces_per_second / one;
      row.of_linear = row.speedup / n;
      fmt::print("{:>7}{:>14.3f}{:>12.0f}{:>10.2f}{:>11.2f}\n", n, row.seconds_per_batch,
                 row.traces_per_second, row.speedup, row.of_linear);
      rows.push_back(row);
    }
    if (!o.json_path.empty()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Row& r : rows)
        out.push_back({{"actors", r.actors},
                       {"seconds_per_batch", r.seconds_per_batch},
                       {"traces_per_second", r.traces_per_second},
                       {"speedup", r.speedup},
                       {"of_linear", r.of_linear}});
      const nlohmann::ordered_json j = {
          {"config", o.config_path}, {"trace_ms", o.trace_ms}, {"batch_images", batch_images},
          {"group", group},          {"steps", steps},         {"rows", out}};
      std::ofstream(o.json_path) << j.dump(1) << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "saccade bench rollouts: {}\n", e.what());
    return 1;
  }
}

}  // namespace saccade::bench
