// The actor's link to its coordinator (internal to workers/runtime): one
// DEALER and the I/O thread that heartbeats, receives rendezvous, drain and
// checkpoint messages, and sends what the body posts. The body runs on the
// caller's thread and talks to it through atomics, a small outbox and the
// transfer state below (guarded by mutex_). Torch-free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "control/checkpoint_transfer.h"
#include "control/control.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::runtime {

// The handler run_actor installs for SIGTERM and SIGINT: the link drains (with
// a final checkpoint) on its next turn.
extern "C" void on_terminate_signal(int signal);

class CoordinatorLink {
 public:
  CoordinatorLink(const ActorOptions& o, JobConfig config, control::Assignment assignment)
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

  ~CoordinatorLink() {
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
  int64_t loaded_step_ = -1;  // of loaded_

  // Rendezvous store requests awaiting the coordinator's answer, by id; guarded by mutex_.
  uint64_t store_next_id_ = 0;
  std::map<uint64_t, std::optional<control::StoreAnswer>> store_pending_;

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

  // Asks the body to stop (and to checkpoint first when `checkpoint`); logs the first reason.
  void drain(const std::string& why, bool checkpoint);

 private:
  // A fresh socket: ZeroMQ gives up on a connection after a protocol error
  // (e.g. a corrupt frame), so a silent coordinator is re-dialled from scratch.
  // No maxmsgsize here for the same reason: wire::open_frame refuses big frames.
  void connect();

  uint64_t generation();

  void send(const std::function<void(wire::Envelope::Builder)>& fill);

  // Sends one message unless the socket's queue is full (false: try again later).
  bool try_send(const std::function<void(wire::Envelope::Builder)>& fill);

  void flush_bulk();

  void io_loop();

  // A new incarnation is a restarted coordinator (the pid alone can repeat on
  // another host): transfers in flight are sent again.
  void note_coordinator(wire::Sender::Reader sender);

  void handle(const wire::Message& m);

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

}  // namespace saccade::runtime
