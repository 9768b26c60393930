#include "workers/runtime/actor_runtime.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "common/logging.h"
#include "control/checkpoint_transfer.h"
#include "control/control.h"
#include "workers/runtime/coordinator_link.h"

namespace saccade::runtime {
namespace {

// The runtime as its body sees it.
class RuntimeContext final : public ActorContext {
 public:
  explicit RuntimeContext(CoordinatorLink& runtime) : runtime_(runtime) {}

  const control::Assignment& assignment() const override {
    runtime_.touch();
    return runtime_.assignment_;
  }
  uint32_t restarts() const override { return runtime_.restarts_; }
  const JobConfig& config() const override { return runtime_.config_; }
  bool stopping() const override {
    runtime_.touch();
    return runtime_.stopping_;
  }
  bool checkpoint_requested() const override { return runtime_.checkpoint_; }
  void touch() override { runtime_.touch(); }

  void report(int64_t step, double items_per_second,
              const std::vector<std::pair<std::string, double>>& metrics) override {
    runtime_.touch();
    runtime_.step_ = step;
    runtime_.items_per_second_ = items_per_second;
    if (metrics.empty()) return;
    runtime_.post([step, metrics](wire::Envelope::Builder e) {
      auto m = e.getBody().initMetrics();
      m.setStep(step);
      auto names = m.initNames(static_cast<unsigned>(metrics.size()));
      auto values = m.initValues(static_cast<unsigned>(metrics.size()));
      for (unsigned i = 0; i < metrics.size(); ++i) {
        names.set(i, metrics[i].first);
        values.set(i, metrics[i].second);
      }
    });
  }

  bool save_checkpoint(int64_t step, const CheckpointBlobs& blobs,
                       std::chrono::milliseconds timeout) override {
    using Transfer = CoordinatorLink::Transfer;
    runtime_.touch();
    auto shared = std::make_shared<const CheckpointBlobs>(blobs);  // chunks point into it
    // Computed once: the manifest that opens every attempt, and the chunks' checksums.
    auto digests =
        std::make_shared<const std::vector<storage::BlobInfo>>(control::digest_blobs(*shared));
    uint64_t bytes = 0, incarnation = 0;
    // Queues the whole checkpoint, its manifest first (a coordinator that already holds it
    // answers at once and the rest is dropped); called again if the coordinator restarts
    // before it answers.
    auto upload = [&] {
      {
        std::lock_guard lock(runtime_.mutex_);
        runtime_.clear_bulk();  // an unsent older checkpoint (or attempt) is superseded
        runtime_.save_ = Transfer::kPending;
        runtime_.save_step_ = step;
        runtime_.save_first_seq_ = UINT64_MAX;
        incarnation = runtime_.coordinator_incarnation_;
      }
      bytes = 0;
      runtime_.post_bulk(
          [step, digests](wire::Envelope::Builder e) {
            control::write_manifest(step, *digests, e.getBody().initCheckpointManifest());
          },
          true);
      control::for_each_chunk(
          *shared, control::checkpoint_chunk_bytes(runtime_.config_.cluster.max_message_bytes),
          [&](const control::ChunkView& c) {
            runtime_.post_bulk(
                [step, c, shared](wire::Envelope::Builder e) {
                  control::write_chunk(step, c, e.getBody().initCheckpointChunk());
                },
                false);
            bytes += c.data.size();
          },
          digests.get());
      runtime_.post_bulk(
          [step, bytes](wire::Envelope::Builder e) {
            auto c = e.getBody().initCheckpointCommitted();
            c.setStep(step);
            c.setBytes(bytes);
          },
          false);
    };
    const int64_t started_ms = control::steady_ms();
    upload();
    std::unique_lock lock(runtime_.mutex_);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (runtime_.save_ == Transfer::kPending && std::chrono::steady_clock::now() < deadline) {
      if (runtime_.coordinator_incarnation_ != incarnation) {
        lock.unlock();
        spdlog::warn(
            "checkpoint {}: the coordinator restarted before committing it; sending it "
            "again",
            step);
        upload();
        deadline = std::chrono::steady_clock::now() + timeout;
        lock.lock();
        continue;
      }
      runtime_.changed_.wait_for(lock, std::chrono::milliseconds(100));
      runtime_.touch();
    }
    const bool ok = runtime_.save_ == Transfer::kDone;
    if (ok) runtime_.last_upload_ms_ = control::steady_ms() - started_ms;
    if (!ok) {
      spdlog::error("checkpoint {} ({} bytes) was not committed by the coordinator{}", step, bytes,
                    runtime_.save_ == Transfer::kPending ? " in time" : "");
      runtime_.clear_bulk();
    }
    runtime_.save_ = Transfer::kIdle;
    return ok;
  }

  std::optional<LoadedCheckpoint> load_checkpoint(const control::CheckpointQuery& query,
                                                  std::chrono::milliseconds timeout) override {
    using Transfer = CoordinatorLink::Transfer;
    runtime_.touch();
    uint64_t incarnation = 0;
    // Asks for the checkpoint; asked again if the coordinator restarts before it arrives.
    auto request = [&] {
      {
        std::lock_guard lock(runtime_.mutex_);
        runtime_.incoming_.reset();
        runtime_.load_ = Transfer::kPending;
        incarnation = runtime_.coordinator_incarnation_;
      }
      runtime_.post([query](wire::Envelope::Builder e) {
        control::write_query(query, e.getBody().initCheckpointRequest());
      });
    };
    request();
    std::unique_lock lock(runtime_.mutex_);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (runtime_.load_ == Transfer::kPending && !runtime_.stopping_ &&
           std::chrono::steady_clock::now() < deadline) {
      if (runtime_.coordinator_incarnation_ != incarnation) {
        lock.unlock();
        spdlog::warn("{}: the coordinator restarted while sending it; asking again",
                     control::describe(query));
        request();
        deadline = std::chrono::steady_clock::now() + timeout;
        lock.lock();
        continue;
      }
      runtime_.changed_.wait_for(lock, std::chrono::milliseconds(100));
      runtime_.touch();
    }
    std::optional<LoadedCheckpoint> out;
    if (runtime_.load_ == Transfer::kDone)
      out = LoadedCheckpoint{runtime_.loaded_step_, std::move(runtime_.loaded_)};
    runtime_.loaded_.clear();
    runtime_.incoming_.reset();
    runtime_.load_ = Transfer::kIdle;
    return out;
  }

  std::optional<RendezvousInfo> rendezvous() const override {
    runtime_.touch();
    std::lock_guard lock(runtime_.mutex_);
    return runtime_.rendezvous_;
  }

  std::optional<RendezvousInfo> wait_rendezvous(uint64_t after_generation,
                                                std::chrono::milliseconds timeout) override {
    runtime_.touch();
    std::unique_lock lock(runtime_.mutex_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto arrived = [&] {
      return runtime_.rendezvous_ && runtime_.rendezvous_->generation > after_generation;
    };
    while (!arrived() && !runtime_.stopping_ && std::chrono::steady_clock::now() < deadline) {
      runtime_.changed_.wait_for(lock, std::chrono::milliseconds(100));
      runtime_.touch();
    }
    if (arrived()) return runtime_.rendezvous_;
    return std::nullopt;
  }

  control::StoreAnswer rendezvous_store(uint64_t generation,
                                        const control::StoreQuery& query) override {
    runtime_.touch();
    uint64_t id = 0, incarnation = 0;
    {
      std::lock_guard lock(runtime_.mutex_);
      id = ++runtime_.store_next_id_;
      runtime_.store_pending_[id];
      incarnation = runtime_.coordinator_incarnation_;
    }
    runtime_.post([id, generation, query](wire::Envelope::Builder e) {
      control::write_store_request(id, generation, query, e.getBody().initStoreRequest());
    });
    // The coordinator answers a wait when it times out; a silent coordinator
    // gets the heartbeat timeout on top before the request is given up.
    const auto& c = runtime_.config_.cluster;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(std::max<int64_t>(query.timeout_ms, 0) +
                                                    c.heartbeat_interval_ms * c.heartbeat_misses);
    control::StoreAnswer out;
    out.id = id;
    std::unique_lock lock(runtime_.mutex_);
    for (;;) {
      auto& answer = runtime_.store_pending_.at(id);
      if (answer) {
        out = std::move(*answer);
        break;
      }
      if (runtime_.stopping_) {
        out.error = "the actor is stopping";
        break;
      }
      if (runtime_.rendezvous_ && runtime_.rendezvous_->generation > generation) {
        out.error = fmt::format("generation {} ended (generation {} began): rendezvous again",
                                generation, runtime_.rendezvous_->generation);
        break;
      }
      if (runtime_.coordinator_incarnation_ != incarnation) {
        out.error = fmt::format(
            "the coordinator restarted: the rendezvous keys of generation {} are gone", generation);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        out.error = "no answer from the coordinator's rendezvous store in time";
        out.timed_out = true;
        break;
      }
      runtime_.changed_.wait_for(lock, std::chrono::milliseconds(100));
      runtime_.touch();
    }
    runtime_.store_pending_.erase(id);
    return out;
  }

  void sleep_for(std::chrono::milliseconds d) override {
    runtime_.touch();
    std::unique_lock lock(runtime_.mutex_);
    runtime_.changed_.wait_for(lock, d, [&] { return runtime_.stopping_.load(); });
    runtime_.touch();
  }

 private:
  CoordinatorLink& runtime_;  // not owned
};

}  // namespace

std::chrono::milliseconds bounded_drain_ms(std::chrono::milliseconds window,
                                           std::chrono::milliseconds last_upload) {
  const auto reserve = std::max(window / 4, 2 * last_upload + std::chrono::seconds(1));
  return std::max(std::chrono::milliseconds(0), window - reserve);
}

int run_actor(const ActorOptions& o, const ActorBodies& bodies) {
  JobConfig config;
  control::Assignment a;
  try {
    a.role = control::role_from_name(o.role);
    config = load_config(o.config_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "saccade actor: %s\n", e.what());
    return kExitBadArguments;
  }
  init_logging({o.role, o.rank, o.log_level.empty() ? config.logging.level : o.log_level,
                o.log_dir.empty() ? config.logging.dir : o.log_dir});
  auto factory = bodies.find(a.role);
  if (factory == bodies.end()) {
    spdlog::error("this binary has no body for role {}", o.role);
    return kExitBadArguments;
  }
  a.rank = o.rank;
  a.local_rank = o.local_rank;
  a.node = o.node;
  a.endpoint = o.endpoint;
  a.local_endpoint = o.local_endpoint;
  a.peers = o.peers;
  a.threads = static_cast<uint32_t>(std::max(o.threads, 0));
  a.device = o.device;
  a.stage = o.stage.empty() ? config.job.stages.front() : o.stage;
  struct sigaction action {};
  action.sa_handler = on_terminate_signal;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGTERM, SIGINT}) sigaction(s, &action, nullptr);
  int code = 0;
  {
    CoordinatorLink runtime(o, config, a);
    RuntimeContext context(runtime);
    std::unique_ptr<ActorBody> body = factory->second();
    std::atomic<bool> body_done{false}, checkpoint_claimed{false};
    std::thread bounded_drain;
    if (body->checkpoint_while_running()) {
      bounded_drain = std::thread([&] {
        // Past the deadline, the drain commits the last completed step and ends
        // the process; the step in progress is dropped (resumed from that step).
        const std::chrono::milliseconds window(config.cluster.drain_timeout_s * 1000);
        while (!body_done) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          const int64_t started = runtime.drain_started_ms_;
          if (started == 0 ||
              control::steady_ms() - started <
                  bounded_drain_ms(window, std::chrono::milliseconds(runtime.last_upload_ms_))
                      .count())
            continue;
          if (body_done || checkpoint_claimed.exchange(true)) return;
          spdlog::warn(
              "drain: the step in progress has not ended {:.1f} s into the {} s window "
              "(cluster.drain_timeout_s); committing the last completed step instead",
              (control::steady_ms() - started) / 1000.0, config.cluster.drain_timeout_s);
          body->checkpoint(context);
          if (body_done) return;
          spdlog::info("body drained mid-step: exit 0");
          spdlog::shutdown();
          std::_Exit(0);  // the body's thread is inside its step: nothing to unwind
        }
      });
    }
    code = body->run(context);
    body_done = true;
    if (code == 0 && runtime.checkpoint_ && !checkpoint_claimed.exchange(true))
      body->checkpoint(context);
    if (bounded_drain.joinable()) bounded_drain.join();
    if (code == 0 && runtime.coordinator_gone_) code = kExitCoordinatorGone;
    spdlog::info("body returned {}", code);
  }  // the runtime flushes what the body posted and closes the socket
  return code;
}

void add_actor_command(CLI::App& app, ActorBodies bodies, std::function<void(int)> on_exit) {
  auto options = std::make_shared<ActorOptions>();
  CLI::App* cmd =
      app.add_subcommand("actor", "Run one actor (started by `saccade agent`, not by hand)");
  cmd->add_option("--role", options->role, "data, learner, rollout or eval")->required();
  cmd->add_option("--rank", options->rank, "Global rank within the role")->required();
  cmd->add_option("--local-rank", options->local_rank, "Rank within the role on this node");
  cmd->add_option("--node", options->node, "Node name")->required();
  cmd->add_option("--coordinator", options->coordinator, "HOST:PORT")->required();
  cmd->add_option("--config", options->config_file, "The job's resolved config")->required();
  cmd->add_option("--endpoint", options->endpoint, "Where this actor binds");
  cmd->add_option("--local-endpoint", options->local_endpoint,
                  "ipc:// endpoint it also binds, for peers on its node");
  cmd->add_option("--peer", options->peers, "Endpoints it connects to");
  cmd->add_option("--threads", options->threads, "Compute threads");
  cmd->add_option("--device", options->device, "cpu or cuda:N");
  cmd->add_option("--stage", options->stage, "The job stage it runs (default: job.stages' first)");
  cmd->add_option("--restarts", options->restarts, "Times this actor was restarted before");
  cmd->callback([options, bodies = std::move(bodies), on_exit] {
    control::resolve_launch("", false);  // the agent's, inherited through $SACCADE_LAUNCH
    on_exit(run_actor(*options, bodies));
  });
}

}  // namespace saccade::runtime
