// The wire: Cap'n Proto envelopes in ZeroMQ frames, validated on arrival.
//
// A received frame may sit at any address and hold anything: it is read in
// place when 8-byte aligned and large, else copied into aligned words (Cap'n
// Proto reads whole words), bounded in size and traversal, traversed whole once, and checked for
// version and job id before anyone reads a field. Refusals return a reason instead of throwing, so
// a bad peer costs one log line, never the process.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "schemas/messages.capnp.h"

namespace saccade::wire {

// What a receiver accepts.
struct Expect {
  std::string job_id;          // frames of another job are refused (but Refusals)...
  size_t max_frame_bytes = 0;  // larger frames are refused unread (cluster.max_message_bytes)
  bool any_job = false;        // ...unless set: the coordinator answers them with a Refusal
  // Non-empty: frames of another non-empty launch are refused (but Refusals, and
  // with any_job). A launch is one start of a job: a Slurm job id, or a token.
  std::string launch{};
};

// The launch this process belongs to, stamped on every envelope it sends
// (like its pid). Set once at start-up by the coordinator, agent and actor
// commands (control::resolve_launch); "" for clients and tests.
void set_process_launch(std::string launch);
const std::string& process_launch();

// This process's incarnation (Sender.incarnation): drawn at random once, never 0.
uint64_t process_incarnation();

// A frame in 8-byte-aligned words (Cap'n Proto reads whole words). Owns its memory.
class AlignedFrame {
 public:
  // Both fail (nullopt, `why` set) if the size is 0, over max_bytes, or not a whole
  // number of 8-byte words.
  // Copies `size` bytes.
  static std::optional<AlignedFrame> copy_of(const void* data, size_t size, size_t max_bytes,
                                             std::string& why);
  // Keeps a received frame of at least kKeptBytes whose data is aligned, without a copy
  // (ZeroMQ gives each large frame an allocation of its own); copies any other.
  static std::optional<AlignedFrame> adopt(zmq::message_t&& received, size_t max_bytes,
                                           std::string& why);
  static constexpr size_t kKeptBytes = size_t{64} << 10;

  kj::ArrayPtr<const capnp::word> words() const;
  size_t size_bytes() const { return n_words_ * sizeof(capnp::word); }

 private:
  AlignedFrame() = default;
  std::unique_ptr<capnp::word[]> copied_;  // owned: the words, when copied...
  zmq::message_t kept_;                    // owned: ...or the received frame holding them
  size_t n_words_ = 0;
};

// A validated envelope. Owns the frame it reads from.
class Message {
 public:
  // Parses and validates a frame: segment table, traversal of the whole
  // message within limits, nothing after the message, protocol version, job
  // id and a body kind this build knows. Fails with `why` set.
  static std::optional<Message> open(AlignedFrame frame, const Expect& expect, std::string& why);

  Envelope::Reader envelope() const { return envelope_; }
  Envelope::Body::Which kind() const { return envelope_.getBody().which(); }

 private:
  Message(std::unique_ptr<AlignedFrame> frame,
          std::unique_ptr<capnp::FlatArrayMessageReader> reader);
  std::unique_ptr<AlignedFrame> frame_;                    // owned; reader_ points into it
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;  // owned
  Envelope::Reader envelope_;
};

enum class RecvStatus {
  kOk,
  kNothing,  // no frame (non-blocking receive or the socket's timeout)
  kRefused,  // a frame arrived and was refused; `why` says why
};

struct Received {
  RecvStatus status = RecvStatus::kNothing;
  std::optional<Message> message;
  std::string why;
};

// Receives one frame (one message part) and validates it. Any parts that
// follow it in the same multi-part message are drained and refused, so a
// malformed multi-part send cannot desynchronise the socket.
Received recv_message(zmq::socket_t& socket, const Expect& expect,
                      zmq::recv_flags flags = zmq::recv_flags::none);

// Validates a frame already received (e.g. after a ROUTER identity part); the message
// keeps the frame's memory when it can (AlignedFrame::adopt).
Received open_frame(zmq::message_t&& frame, const Expect& expect);

// Header fields every sender fills the same way.
struct SenderInfo {
  std::string job_id;
  Role role = Role::UNKNOWN;
  int32_t rank = 0;
  std::string node;
};

// Starts an envelope in `builder` with job id, version, sender, time and seq filled in.
Envelope::Builder start_envelope(capnp::MessageBuilder& builder, const SenderInfo& from,
                                 uint64_t generation, uint64_t seq);

// Flattens a built message into a ZeroMQ message, large ones into the process's
// FramePool (schemas/frame_pool.h).
zmq::message_t to_zmq(capnp::MessageBuilder& builder);

// CLOCK_REALTIME in nanoseconds, as carried in Envelope.sentAtNs.
int64_t now_ns();

// Name of a body kind, for logs.
const char* kind_name(Envelope::Body::Which kind);

}  // namespace saccade::wire
