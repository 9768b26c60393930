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

namespace saccade::runtime {
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_terminate(int s) {
  g_signal.store(s);
}

std::map<wire::Role, ActorBodyFactory>& registry() {
  static std::map<wire::Role, ActorBodyFactory> bodies;
  return bodies;
}

}  // namespace

void register_actor_body(wire::Role role, ActorBodyFactory factory) {
  registry()[role] = std::move(factory);
}

// Owns the socket and the I/O thread that heartbeats; the body runs on the
// caller's thread and talks to it through atomics and a small outbox.
class ActorRuntime {
 public:
  ActorRuntime(const ActorOptions& o, JobConfig config, control::Assignment assignment)
      : config_(std::move(config)),
        assignment_(std::move(assignment)),
        restarts_(static_cast<uint32_t>(o.restarts)),
        security_(control::load_security(config_.security, false)),
        endpoint_(control::tcp_endpoint(o.coordinator, "--coordinator")),
        writer_({config_.job.name, assignment_.role, assignment_.rank, assignment_.node}) {
    connect();
    touch();
    io_ = std::thread([this] { io_loop(); });
  }

  ~ActorRuntime() {
    io_stop_ = true;
    io_.join();
  }

  void touch() { last_touch_ms_ = control::steady_ms(); }

  const JobConfig config_;
  const control::Assignment assignment_;
  const uint32_t restarts_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> checkpoint_{false};
  std::atomic<bool> coordinator_gone_{false};
  std::atomic<int64_t> step_{0};
  std::atomic<double> items_per_second_{0};
  std::atomic<int64_t> last_touch_ms_{0};
  std::atomic<int64_t> drain_started_ms_{0};  // first drain that wants a checkpoint; 0: none
  std::atomic<int64_t> last_upload_ms_{0};    // the last committed checkpoint's upload
  mutable std::mutex mutex_;                  // guards rendezvous_ and outbox_
  std::condition_variable changed_;
  std::optional<RendezvousInfo> rendezvous_;
  std::deque<std::function<void(wire::Envelope::Builder)>> outbox_;
  // Checkpoint chunks going out, in order. Unbounded (one checkpoint at a
  // time) and never dropped: sent as fast as the socket takes them.
  struct BulkMessage {
    std::function<void(wire::Envelope::Builder)> fill;
    bool starts_upload = false;  // the first message of a checkpoint upload
  };
  std::deque<BulkMessage> bulk_;
  uint64_t bulk_epoch_ = 0;  // bumped by clear_bulk(): a message sent meanwhile is not popped
  // Bumps when messages start coming from another coordinator process (one
  // restarted from its database): a transfer in flight is started again.
  uint64_t coordinator_incarnation_ = 0;

  // The checkpoint transfer in flight, guarded by mutex_.
  enum class Transfer { kIdle, kPending, kDone, kFailed };
  Transfer save_ = Transfer::kIdle;
  int64_t save_step_ = -1;
  // Seq of the current upload's first message: a refusal of anything older
  // answers an upload given up (e.g. its tail reaching a restarted coordinator).
  uint64_t save_first_seq_ = UINT64_MAX;
  Transfer load_ = Transfer::kIdle;
  control::CheckpointAssembler incoming_;
  control::Blobs loaded_;

  void post(std::function<void(wire::Envelope::Builder)> fill) {
    std::lock_guard lock(mutex_);
    if (outbox_.size() < 1024) outbox_.push_back(std::move(fill));  // bounded: drop when flooded
  }

  // Drops the queued upload (mutex_ held). The I/O thread may be sending its front
  // message right now: the epoch tells it not to pop what replaced it.
  void clear_bulk() {
    bulk_.clear();
    ++bulk_epoch_;
  }

  void post_bulk(std::function<void(wire::Envelope::Builder)> fill, bool starts_upload) {
    std::lock_guard lock(mutex_);
    bulk_.push_back({std::move(fill), starts_upload});
  }

  void drain(const std::string& why, bool checkpoint) {
    if (checkpoint && !checkpoint_.exchange(true)) drain_started_ms_ = control::steady_ms();
    if (!stopping_.exchange(true)) spdlog::info("draining: {}", why);
    changed_.notify_all();
  }

 private:
  // A fresh socket: ZeroMQ gives up on a connection after a protocol error
  // (e.g. a corrupt frame), so a silent coordinator is re-dialled from scratch.
  // No maxmsgsize here for the same reason: wire::open_frame refuses big frames.
  void connect() {
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    control::configure_client(socket_, security_,
                              control::actor_identity(assignment_.role, assignment_.rank));
    socket_.connect(endpoint_);
    connected_ms_ = control::steady_ms();
  }

  uint64_t generation() {
    std::lock_guard lock(mutex_);
    return rendezvous_ ? rendezvous_->generation : 0;
  }

  void send(const std::function<void(wire::Envelope::Builder)>& fill) {
    try {
      socket_.send(writer_.make(generation(), fill), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::debug("send failed: {}", e.what());
    }
  }

  // Sends one message unless the socket's queue is full (false: try again later).
  bool try_send(const std::function<void(wire::Envelope::Builder)>& fill) {
    try {
      return socket_.send(writer_.make(generation(), fill), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t& e) {
      spdlog::debug("send failed: {}", e.what());
      return true;  // not retried: the socket is gone, the transfer times out
    }
  }

  void flush_bulk() {
    for (;;) {
      BulkMessage message;
      uint64_t epoch = 0;
      {
        std::lock_guard lock(mutex_);
        if (bulk_.empty()) return;
        message = bulk_.front();
        epoch = bulk_epoch_;
      }
      const uint64_t seq = writer_.next_seq();
      if (!try_send(message.fill)) return;
      std::lock_guard lock(mutex_);
      if (epoch != bulk_epoch_) continue;  // the upload was dropped or restarted meanwhile
      if (message.starts_upload) save_first_seq_ = seq;
      bulk_.pop_front();
    }
  }

  void io_loop() {
    const int64_t interval = config_.cluster.heartbeat_interval_ms;
    const int64_t timeout = interval * config_.cluster.heartbeat_misses;
    const wire::Expect expect = control::expect_for(config_);
    int64_t last_coordinator = control::steady_ms(), next_beat = 0;
    bool lost = false, stalled = false, signalled = false;
    for (;;) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      control::poll_interruptible(&item, 1,
                                  std::chrono::milliseconds(std::min<int64_t>(interval, 20)));
      for (int i = 0; i < 1000 && (item.revents & ZMQ_POLLIN); ++i) {
        wire::Received r = wire::recv_message(socket_, expect, zmq::recv_flags::dontwait);
        if (r.status == wire::RecvStatus::kNothing) break;
        if (r.status == wire::RecvStatus::kRefused) {
          drops_.refused("coordinator", r.why);
        } else if (r.message->envelope().getSender().getRole() != wire::Role::COORDINATOR) {
          drops_.refused("coordinator", "a message not from the coordinator");
        } else {
          last_coordinator = control::steady_ms();
          note_coordinator(r.message->envelope().getSender());
          handle(*r.message);
        }
      }
      const int64_t now = control::steady_ms();
      if (const int s = g_signal.load(); s != 0 && !signalled) {
        signalled = true;
        drain(fmt::format("received {}", strsignal(s)), true);
        send([&](wire::Envelope::Builder e) {
          auto ev = e.getBody().initActorEvent();
          ev.setRole(assignment_.role);
          ev.setRank(assignment_.rank);
          ev.setPid(static_cast<uint32_t>(getpid()));
          ev.setState(wire::ActorState::DRAINING);
          ev.setReason(fmt::format("received {}", strsignal(s)));
        });
      }
      if (now - last_coordinator > timeout) {
        if (!lost) spdlog::warn("coordinator lost: nothing for {} ms; waiting for it", timeout);
        lost = true;
        if (now - connected_ms_ > timeout) connect();
        if (now - last_coordinator > config_.cluster.reconnect_grace_s * 1000) {
          coordinator_gone_ = true;
          drain("coordinator gone", false);
        }
      } else if (lost) {
        spdlog::info("coordinator back");
        lost = false;
      }
      // Read before the flush: what was posted before it goes out. A body that ended while
      // the coordinator is away waits for it (up to the grace) so its final step is not lost.
      const bool last = io_stop_ && (!lost || coordinator_gone_);
      for (;;) {
        std::function<void(wire::Envelope::Builder)> fill;
        {
          std::lock_guard lock(mutex_);
          if (outbox_.empty()) break;
          fill = std::move(outbox_.front());
          outbox_.pop_front();
        }
        send(fill);
      }
      flush_bulk();
      const int64_t stall = config_.cluster.stall_timeout_s * 1000;
      const bool now_stalled = !io_stop_ && stall > 0 && now - last_touch_ms_.load() > stall;
      if (now_stalled != stalled) {
        stalled = now_stalled;
        if (stalled) spdlog::error("body stalled for {} s: no more heartbeats", stall / 1000);
      }
      // The last beat carries the body's final step.
      if ((now >= next_beat || last) && !stalled) {
        next_beat = now + interval;
        send([&](wire::Envelope::Builder e) {
          auto hb = e.getBody().initHeartbeat();
          hb.setState(stopping_ ? wire::ActorState::DRAINING : wire::ActorState::RUNNING);
          hb.setStep(step_.load());
          hb.setItemsPerSecond(items_per_second_.load());
        });
      }
      if (last) return;
    }
  }

  // A new incarnation is a restarted coordinator (the pid alone can repeat on
  // another host): transfers in flight are sent again.
  void note_coordinator(wire::Sender::Reader sender) {
    const uint64_t incarnation = sender.getIncarnation();
    if (incarnation == coordinator_id_) return;
    if (coordinator_id_ != 0) {
      spdlog::warn("coordinator restarted (pid {} -> {})", coordinator_pid_, sender.getPid());
      std::lock_guard lock(mutex_);
      ++coordinator_incarnation_;
      changed_.notify_all();
    }
    coordinator_id_ = incarnation;
    coordinator_pid_ = sender.getPid();
  }

  void handle(const wire::Message& m) {
    const auto body = m.envelope().getBody();
    switch (m.kind()) {
      case wire::Envelope::Body::HEARTBEAT:
        return;
      case wire::Envelope::Body::SHUTDOWN:
        drain(std::string("coordinator: ") + body.getShutdown().getReason().cStr(),
              body.getShutdown().getCheckpointFirst());
        return;
      case wire::Envelope::Body::RENDEZVOUS: {
        const auto r = body.getRendezvous();
        RendezvousInfo info{r.getStoreHost(),
                            r.getStorePort(),
                            r.getWorldSize(),
                            r.getRank(),
                            r.getResumeFromStep(),
                            r.getCollectiveTimeoutMs(),
                            m.envelope().getGeneration()};
        if (info.rank != assignment_.rank || info.world_size <= info.rank) {
          drops_.refused("coordinator", "rendezvous for another rank");
          return;
        }
        std::lock_guard lock(mutex_);
        if (rendezvous_ && rendezvous_->generation >= info.generation) return;
        spdlog::info("rendezvous generation {}: store {}:{}, world {}, resume from step {}",
                     info.generation, info.store_host, info.store_port, info.world_size,
                     info.resume_from_step);
        rendezvous_ = info;
        changed_.notify_all();
        return;
      }
      case wire::Envelope::Body::CHECKPOINT_CHUNK: {
        std::lock_guard lock(mutex_);
        if (load_ != Transfer::kPending) return;  // a late chunk of a transfer given up
        const std::string why =
            incoming_.add(body.getCheckpointChunk(), config_.cluster.max_checkpoint_bytes);
        if (!why.empty()) {
          spdlog::error("checkpoint from the coordinator refused: {}", why);
          load_ = Transfer::kFailed;
          changed_.notify_all();
        }
        return;
      }
      case wire::Envelope::Body::CHECKPOINT_COMMITTED: {
        const int64_t step = body.getCheckpointCommitted().getStep();
        const uint64_t bytes = body.getCheckpointCommitted().getBytes();
        std::lock_guard lock(mutex_);
        if (save_ == Transfer::kPending && step == save_step_) {
          save_ = Transfer::kDone;
        } else if (load_ == Transfer::kPending) {
          if (incoming_.complete(bytes) && incoming_.step() == step) {
            loaded_ = incoming_.take();
            load_ = Transfer::kDone;
          } else {
            spdlog::error("checkpoint {} from the coordinator is incomplete", step);
            load_ = Transfer::kFailed;
          }
        }
        changed_.notify_all();
        return;
      }
      case wire::Envelope::Body::ACK: {
        const auto ack = body.getAck();
        if (ack.getOk()) return;
        std::lock_guard lock(mutex_);
        if (save_ == Transfer::kPending && ack.getSeq() >= save_first_seq_)
          save_ = Transfer::kFailed;
        if (load_ == Transfer::kPending) load_ = Transfer::kFailed;
        spdlog::warn("coordinator: {}", ack.getError().cStr());
        changed_.notify_all();
        return;
      }
      default:
        drops_.refused("coordinator", fmt::format("unexpected {}", wire::kind_name(m.kind())));
    }
  }

  control::Security security_;
  zmq::context_t context_;
  std::string endpoint_;
  zmq::socket_t socket_;  // used by the I/O thread only
  int64_t connected_ms_ = 0;
  uint32_t coordinator_pid_ = 0;  // of the last coordinator message; I/O thread only
  uint64_t coordinator_id_ = 0;   // its Sender.incarnation; I/O thread only
  control::EnvelopeWriter writer_;
  control::DropLog drops_;
  std::atomic<bool> io_stop_{false};
  std::thread io_;
};

namespace {

// The runtime as its body sees it.
class RuntimeContext final : public ActorContext {
 public:
  explicit RuntimeContext(ActorRuntime& runtime) : runtime_(runtime) {}

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
    using Transfer = ActorRuntime::Transfer;
    runtime_.touch();
    auto shared = std::make_shared<const CheckpointBlobs>(blobs);  // chunks point into it
    uint64_t bytes = 0, incarnation = 0;
    // Queues the whole checkpoint; called again if the coordinator restarts before it answers.
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
      bool first = true;
      control::for_each_chunk(
          *shared, control::checkpoint_chunk_bytes(runtime_.config_.cluster.max_message_bytes),
          [&](const control::ChunkView& c) {
            runtime_.post_bulk(
                [step, c, shared](wire::Envelope::Builder e) {
                  control::write_chunk(step, c, e.getBody().initCheckpointChunk());
                },
                std::exchange(first, false));
            bytes += c.data.size();
          });
      runtime_.post_bulk(
          [step, bytes](wire::Envelope::Builder e) {
            auto c = e.getBody().initCheckpointCommitted();
            c.setStep(step);
            c.setBytes(bytes);
          },
          first);  // no blobs: the commit marker is the whole upload
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

  std::optional<CheckpointBlobs> load_checkpoint(const control::CheckpointQuery& query,
                                                 std::chrono::milliseconds timeout) override {
    using Transfer = ActorRuntime::Transfer;
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
    std::optional<CheckpointBlobs> out;
    if (runtime_.load_ == Transfer::kDone) out = std::move(runtime_.loaded_);
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

  void sleep_for(std::chrono::milliseconds d) override {
    runtime_.touch();
    std::unique_lock lock(runtime_.mutex_);
    runtime_.changed_.wait_for(lock, d, [&] { return runtime_.stopping_.load(); });
    runtime_.touch();
  }

 private:
  ActorRuntime& runtime_;  // not owned
};

}  // namespace

std::chrono::milliseconds bounded_drain_ms(std::chrono::milliseconds window,
                                           std::chrono::milliseconds last_upload) {
  const auto reserve = std::max(window / 4, 2 * last_upload + std::chrono::seconds(1));
  return std::max(std::chrono::milliseconds(0), window - reserve);
}

int run_actor(const ActorOptions& o) {
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
  auto factory = registry().find(a.role);
  if (factory == registry().end()) {
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
  struct sigaction action {};
  action.sa_handler = on_terminate;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGTERM, SIGINT}) sigaction(s, &action, nullptr);
  int code = 0;
  {
    ActorRuntime runtime(o, config, a);
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

void add_actor_command(CLI::App& app, std::function<void(int)> on_exit) {
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
  cmd->add_option("--restarts", options->restarts, "Times this actor was restarted before");
  cmd->callback([options, on_exit] {
    control::resolve_launch("", false);  // the agent's, inherited through $SACCADE_LAUNCH
    on_exit(run_actor(*options));
  });
}

}  // namespace saccade::runtime
