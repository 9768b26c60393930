#include "schemas/wire.h"

#include "schemas/frame_pool.h"

#include <capnp/dynamic.h>
#include <capnp/schema.h>
#include <fmt/format.h>
#include <unistd.h>

#include <kj/exception.h>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>

namespace saccade::wire {
namespace {

capnp::StructSchema body_schema() {
  return capnp::Schema::from<Envelope::Body>();
}

// Reads every field once (texts included, whose NUL terminator getters check),
// so that no getter a handler calls later can throw.
void read_everything(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::STRUCT: {
      capnp::DynamicStruct::Reader s = value.as<capnp::DynamicStruct>();
      for (capnp::StructSchema::Field field : s.getSchema().getNonUnionFields()) {
        if (s.has(field)) read_everything(s.get(field));
      }
      KJ_IF_MAYBE (active, s.which()) {
        if (s.has(*active)) read_everything(s.get(*active));
      }
      break;
    }
    case capnp::DynamicValue::LIST:
      for (capnp::DynamicValue::Reader element : value.as<capnp::DynamicList>())
        read_everything(element);
      break;
    case capnp::DynamicValue::TEXT:
      (void)value.as<capnp::Text>();
      break;
    default:
      break;
  }
}

// Why a frame of `size` bytes cannot be read, or "" if it can.
std::string frame_size_problem(size_t size, size_t max_bytes) {
  if (size == 0) return "empty frame";
  if (size > max_bytes)
    return fmt::format("frame of {} bytes exceeds the limit of {} bytes", size, max_bytes);
  if (size % sizeof(capnp::word) != 0)
    return fmt::format("frame of {} bytes is not a whole number of 8-byte words (truncated?)",
                       size);
  return "";
}

}  // namespace

std::optional<AlignedFrame> AlignedFrame::copy_of(const void* data, size_t size, size_t max_bytes,
                                                  std::string& why) {
  why = frame_size_problem(size, max_bytes);
  if (!why.empty()) return std::nullopt;
  const size_t n = size / sizeof(capnp::word);
  AlignedFrame frame;
  frame.copied_ = std::make_unique_for_overwrite<capnp::word[]>(n);
  std::memcpy(frame.copied_.get(), data, size);
  frame.n_words_ = n;
  return frame;
}

std::optional<AlignedFrame> AlignedFrame::adopt(zmq::message_t&& received, size_t max_bytes,
                                                std::string& why) {
  const size_t size = received.size();
  const bool aligned = reinterpret_cast<uintptr_t>(received.data()) % alignof(capnp::word) == 0;
  if (!aligned || size < kKeptBytes) return copy_of(received.data(), size, max_bytes, why);
  why = frame_size_problem(size, max_bytes);
  if (!why.empty()) return std::nullopt;
  AlignedFrame frame;
  frame.kept_ = std::move(received);
  frame.n_words_ = size / sizeof(capnp::word);
  return frame;
}

kj::ArrayPtr<const capnp::word> AlignedFrame::words() const {
  const capnp::word* begin =
      copied_ ? copied_.get() : static_cast<const capnp::word*>(kept_.data());
  return {begin, n_words_};
}

Message::Message(std::unique_ptr<AlignedFrame> frame,
                 std::unique_ptr<capnp::FlatArrayMessageReader> reader)
    : frame_(std::move(frame)),
      reader_(std::move(reader)),
      envelope_(reader_->getRoot<Envelope>()) {}

std::optional<Message> Message::open(AlignedFrame frame, const Expect& expect, std::string& why) {
  auto owned = std::make_unique<AlignedFrame>(std::move(frame));
  // Validation reads the whole message once under a traversal bound that
  // forbids amplification (pointers reused to make a small frame look huge).
  capnp::ReaderOptions bounded;
  bounded.traversalLimitInWords = owned->words().size() * 4 + 64;
  bounded.nestingLimit = 32;
  try {
    capnp::FlatArrayMessageReader check(owned->words(), bounded);
    if (check.getEnd() != owned->words().end()) {
      why = fmt::format("{} trailing bytes after the message",
                        (owned->words().end() - check.getEnd()) * sizeof(capnp::word));
      return std::nullopt;
    }
    read_everything(check.getRoot<Envelope>());
    // Proven well-formed and finite: handlers may now re-read fields freely.
    capnp::ReaderOptions unbounded;
    unbounded.traversalLimitInWords = std::numeric_limits<uint64_t>::max();
    unbounded.nestingLimit = 32;
    auto reader = std::make_unique<capnp::FlatArrayMessageReader>(owned->words(), unbounded);
    Envelope::Reader env = reader->getRoot<Envelope>();
    if (env.getVersion() != PROTOCOL_VERSION) {
      why = fmt::format("protocol version {} (this build speaks {})", env.getVersion(),
                        PROTOCOL_VERSION);
      return std::nullopt;
    }
    const auto which = static_cast<uint16_t>(env.getBody().which());
    if (which >= body_schema().getUnionFields().size()) {
      why = fmt::format("unknown message kind {}", which);
      return std::nullopt;
    }
    const bool checked = !expect.any_job && env.getBody().which() != Envelope::Body::REFUSAL;
    if (checked && env.getJobId() != expect.job_id.c_str()) {
      why = fmt::format("job id \"{}\" is not this job's (\"{}\")", env.getJobId().cStr(),
                        expect.job_id);
      return std::nullopt;
    }
    if (checked && !expect.launch.empty() && env.getLaunch().size() > 0 &&
        env.getLaunch() != expect.launch.c_str()) {
      why = fmt::format("launch \"{}\" is not this launch's (\"{}\")", env.getLaunch().cStr(),
                        expect.launch);
      return std::nullopt;
    }
    return Message(std::move(owned), std::move(reader));
  } catch (const kj::Exception& e) {
    why = fmt::format("malformed message: {}", e.getDescription().cStr());
    return std::nullopt;
  }
}

Received open_frame(zmq::message_t&& frame, const Expect& expect) {
  Received out;
  out.status = RecvStatus::kRefused;
  std::optional<AlignedFrame> aligned =
      AlignedFrame::adopt(std::move(frame), expect.max_frame_bytes, out.why);
  if (!aligned) return out;
  out.message = Message::open(std::move(*aligned), expect, out.why);
  if (out.message) out.status = RecvStatus::kOk;
  return out;
}

Received recv_message(zmq::socket_t& socket, const Expect& expect, zmq::recv_flags flags) {
  zmq::message_t frame;
  if (!socket.recv(frame, flags)) return {};
  bool more = frame.more();
  Received out = open_frame(std::move(frame), expect);
  int extra = 0;
  while (more) {  // a sender that splits frames is not speaking our protocol
    zmq::message_t rest;
    if (!socket.recv(rest, zmq::recv_flags::dontwait)) break;
    more = rest.more();
    ++extra;
  }
  if (extra > 0) {
    out.status = RecvStatus::kRefused;
    out.message.reset();
    out.why = fmt::format("multi-part message with {} unexpected extra parts", extra);
  }
  return out;
}

Envelope::Builder start_envelope(capnp::MessageBuilder& builder, const SenderInfo& from,
                                 uint64_t generation, uint64_t seq) {
  Envelope::Builder env = builder.initRoot<Envelope>();
  env.setJobId(from.job_id);
  env.setVersion(PROTOCOL_VERSION);
  env.setGeneration(generation);
  env.setSentAtNs(now_ns());
  env.setSeq(seq);
  Sender::Builder s = env.initSender();
  s.setRole(from.role);
  s.setRank(from.rank);
  s.setNode(from.node);
  s.setPid(static_cast<uint32_t>(::getpid()));
  s.setIncarnation(process_incarnation());
  env.setLaunch(process_launch());
  return env;
}

uint64_t process_incarnation() {
  static const uint64_t incarnation = [] {
    std::random_device device;
    std::mt19937_64 mix((uint64_t{device()} << 32) ^ device() ^ now_ns());
    uint64_t v = 0;
    while (v == 0) v = mix();
    return v;
  }();
  return incarnation;
}

namespace {
std::string& launch_of_this_process() {
  static std::string launch;
  return launch;
}
}  // namespace

void set_process_launch(std::string launch) {
  launch_of_this_process() = std::move(launch);
}

const std::string& process_launch() {
  return launch_of_this_process();
}

zmq::message_t to_zmq(capnp::MessageBuilder& builder) {
  return FramePool::process().frame_of(builder);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* kind_name(Envelope::Body::Which kind) {
  const auto fields = body_schema().getUnionFields();
  const auto i = static_cast<uint16_t>(kind);
  return i < fields.size() ? fields[i].getProto().getName().cStr() : "unknown";
}

}  // namespace saccade::wire
