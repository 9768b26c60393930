#include "workers/runtime/coordinator_link.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace saccade::runtime {
namespace {
std::atomic<int> g_signal{0};  // the last SIGTERM/SIGINT, 0: none
}  // namespace

extern "C" void on_terminate_signal(int signal) {
  g_signal.store(signal);
}

void CoordinatorLink::drain(const std::string& why, bool checkpoint) {
  if (checkpoint && !checkpoint_.exchange(true)) drain_started_ms_ = control::steady_ms();
  if (!stopping_.exchange(true)) spdlog::info("draining: {}", why);
  changed_.notify_all();
}

void CoordinatorLink::connect() {
  socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
  control::configure_client(socket_, security_,
                            control::actor_identity(assignment_.role, assignment_.rank));
  socket_.connect(endpoint_);
  connected_ms_ = control::steady_ms();
}

uint64_t CoordinatorLink::generation() {
  std::lock_guard lock(mutex_);
  return rendezvous_ ? rendezvous_->generation : 0;
}

void CoordinatorLink::send(const std::function<void(wire::Envelope::Builder)>& fill) {
  try {
    socket_.send(writer_.make(generation(), fill), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::debug("send failed: {}", e.what());
  }
}

bool CoordinatorLink::try_send(const std::function<void(wire::Envelope::Builder)>& fill) {
  try {
    return socket_.send(writer_.make(generation(), fill), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    spdlog::debug("send failed: {}", e.what());
    return true;  // not retried: the socket is gone, the transfer times out
  }
}

void CoordinatorLink::flush_bulk() {
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

void CoordinatorLink::io_loop() {
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
    // Posted messages (store requests, checkpoint requests, metrics) wait while the socket's
    // queue is full, e.g. of a given-up checkpoint's chunks: dropped, a rendezvous request
    // would leave its learner waiting out the collective timeout. They go before bulk chunks.
    for (;;) {
      std::function<void(wire::Envelope::Builder)> fill;
      {
        std::lock_guard lock(mutex_);
        if (outbox_.empty()) break;
        fill = std::move(outbox_.front());
        outbox_.pop_front();
      }
      if (!try_send(fill)) {
        std::lock_guard lock(mutex_);
        outbox_.push_front(std::move(fill));
        break;
      }
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

void CoordinatorLink::note_coordinator(wire::Sender::Reader sender) {
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

void CoordinatorLink::handle(const wire::Message& m) {
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
      RendezvousInfo info{r.getWorldSize(), r.getRank(), r.getResumeFromStep(),
                          r.getCollectiveTimeoutMs(), m.envelope().getGeneration()};
      if (info.rank != assignment_.rank || info.world_size <= info.rank) {
        drops_.refused("coordinator", "rendezvous for another rank");
        return;
      }
      if (info.resume_from_step < -1 || info.collective_timeout_ms <= 0) {
        drops_.refused("coordinator",
                       fmt::format("rendezvous with resume step {} and collective timeout {} ms "
                                   "(expected >= -1 and > 0)",
                                   info.resume_from_step, info.collective_timeout_ms));
        return;
      }
      std::lock_guard lock(mutex_);
      if (rendezvous_ && rendezvous_->generation >= info.generation) return;
      spdlog::info("rendezvous generation {}: world {}, resume from step {}", info.generation,
                   info.world_size, info.resume_from_step);
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
        if (!bulk_.empty())  // answered from the coordinator's store: the rest need not go
          spdlog::info("checkpoint {}: the coordinator already holds it; {} queued chunks not sent",
                       step, bulk_.size());
        clear_bulk();
      } else if (load_ == Transfer::kPending) {
        if (incoming_.complete(bytes) && incoming_.step() == step) {
          loaded_ = incoming_.take();
          loaded_step_ = step;
          load_ = Transfer::kDone;
        } else {
          spdlog::error("checkpoint {} from the coordinator is incomplete", step);
          load_ = Transfer::kFailed;
        }
      }
      changed_.notify_all();
      return;
    }
    case wire::Envelope::Body::STORE_REPLY: {
      control::StoreAnswer a = control::read_store_reply(body.getStoreReply());
      std::lock_guard lock(mutex_);
      auto it = store_pending_.find(a.id);
      if (it == store_pending_.end() || it->second) return;  // given up on, or a duplicate
      it->second = std::move(a);
      changed_.notify_all();
      return;
    }
    case wire::Envelope::Body::ACK: {
      const auto ack = body.getAck();
      if (ack.getOk()) return;
      std::lock_guard lock(mutex_);
      bool ends_transfer = false;
      if (save_ == Transfer::kPending && ack.getSeq() >= save_first_seq_) {
        save_ = Transfer::kFailed;
        ends_transfer = true;
      }
      if (load_ == Transfer::kPending) {
        load_ = Transfer::kFailed;
        ends_transfer = true;
      }
      // A refused upload has up to a send queue of chunks in flight, each refused in turn:
      // the first refusal says why, the rest are its echo.
      if (ends_transfer)
        spdlog::warn("coordinator: {}", ack.getError().cStr());
      else
        spdlog::debug("coordinator: {}", ack.getError().cStr());
      changed_.notify_all();
      return;
    }
    default:
      drops_.refused("coordinator", fmt::format("unexpected {}", wire::kind_name(m.kind())));
  }
}

}  // namespace saccade::runtime
