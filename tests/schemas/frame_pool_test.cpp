#include "schemas/frame_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "schemas/wire.h"

namespace saccade::wire {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
const Expect kExpect{"job-a", 64 * kMiB};
const SenderInfo kFrom{"job-a", Role::DATA, 0, "node0"};

// A batch frame whose one tensor holds `bytes` bytes of a pattern that depends on `seed`.
struct BatchMessage {
  std::vector<uint8_t> payload;
  capnp::MallocMessageBuilder builder;
  BatchMessage(size_t bytes, uint8_t seed) : payload(bytes) {
    for (size_t i = 0; i < bytes; ++i) payload[i] = static_cast<uint8_t>(i * 31 + seed);
    Batch::Builder batch = start_envelope(builder, kFrom, 0, seed).getBody().initBatch();
    Tensor::Builder t = batch.initTensors(1)[0];
    t.setName("pixels");
    t.setDtype(DType::UINT8);
    t.initShape(1).set(0, static_cast<int64_t>(bytes));
    t.setData(kj::arrayPtr(payload.data(), payload.size()));
  }
};

// Opens a frame and checks that it carries `sent`'s payload bit for bit.
void expect_carries(zmq::message_t frame, const BatchMessage& sent) {
  Received r = open_frame(std::move(frame), kExpect);
  ASSERT_EQ(r.status, RecvStatus::kOk) << r.why;
  capnp::Data::Reader data = r.message->envelope().getBody().getBatch().getTensors()[0].getData();
  ASSERT_EQ(data.size(), sent.payload.size());
  EXPECT_EQ(std::memcmp(data.begin(), sent.payload.data(), data.size()), 0);
}

TEST(FramePool, AReleasedBufferServesTheNextFrame) {
  FramePool pool({.min_bytes = kMiB, .max_cached = 2});
  BatchMessage first(3 * kMiB, 1), second(3 * kMiB - 4096, 2);
  const void* first_data = nullptr;
  {
    zmq::message_t frame = pool.frame_of(first.builder);
    first_data = frame.data();
    EXPECT_EQ(pool.stats().allocated, 1u);
    EXPECT_EQ(pool.stats().cached, 0u);  // in use by the frame
    expect_carries(std::move(frame), first);
  }
  EXPECT_EQ(pool.stats().cached, 1u);
  EXPECT_GE(pool.stats().cached_bytes, 3 * kMiB);
  zmq::message_t frame = pool.frame_of(second.builder);
  EXPECT_EQ(frame.data(), first_data);  // the same memory, written over
  EXPECT_EQ(pool.stats().allocated, 1u);
  EXPECT_EQ(pool.stats().reused, 1u);
  expect_carries(std::move(frame), second);
}

TEST(FramePool, FramesInFlightTakeTheirOwnBuffersAndFewAreKept) {
  FramePool pool({.min_bytes = kMiB, .max_cached = 2});
  BatchMessage small(2 * kMiB, 3), large(6 * kMiB, 4);
  {
    std::vector<zmq::message_t> in_flight;
    for (int i = 0; i < 3; ++i) in_flight.push_back(pool.frame_of(small.builder));
    in_flight.push_back(pool.frame_of(large.builder));
    EXPECT_EQ(pool.stats().allocated, 4u);
    EXPECT_NE(in_flight[0].data(), in_flight[1].data());
    expect_carries(std::move(in_flight[2]), small);
    expect_carries(std::move(in_flight[3]), large);
  }
  // Four buffers came back; the two kept are the large one and one small one.
  const FramePool::Stats kept = pool.stats();
  EXPECT_EQ(kept.cached, 2u);
  EXPECT_GE(kept.cached_bytes, 8 * kMiB);
  // A small frame takes the small buffer, so the large one stays for a large frame.
  zmq::message_t a = pool.frame_of(small.builder);
  zmq::message_t b = pool.frame_of(large.builder);
  EXPECT_EQ(pool.stats().reused, 2u);
  EXPECT_EQ(pool.stats().allocated, 4u);
  expect_carries(std::move(a), small);
  expect_carries(std::move(b), large);
}

TEST(FramePool, SmallFramesDoNotUseIt) {
  FramePool pool({.min_bytes = kMiB, .max_cached = 2});
  BatchMessage small(64 << 10, 5);
  expect_carries(pool.frame_of(small.builder), small);
  EXPECT_EQ(pool.stats().allocated, 0u);
  EXPECT_EQ(pool.stats().reused, 0u);
  EXPECT_EQ(pool.stats().cached, 0u);
}

TEST(FramePool, ZeroMqReturnsTheBufferOnceItSentTheFrame) {
  FramePool pool({.min_bytes = kMiB, .max_cached = 2});  // outlives the sockets' messages
  zmq::context_t context;
  zmq::socket_t pull(context, zmq::socket_type::pull), push(context, zmq::socket_type::push);
  pull.set(zmq::sockopt::rcvtimeo, 5000);
  pull.set(zmq::sockopt::linger, 0);
  push.set(zmq::sockopt::linger, 0);
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  BatchMessage sent(5 * kMiB, 6);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(push.send(pool.frame_of(sent.builder), zmq::send_flags::none));
    zmq::message_t received;
    ASSERT_TRUE(pull.recv(received));
    expect_carries(std::move(received), sent);
    // The I/O thread releases the frame after writing it, a moment after it arrived.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (pool.stats().cached == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(pool.stats().cached, 1u) << "round " << round;
  }
  EXPECT_EQ(pool.stats().allocated, 1u);
  EXPECT_EQ(pool.stats().reused, 2u);
}

// Frames released on other threads (as ZeroMQ's I/O threads release them) while this one
// keeps writing new frames: a buffer serves one frame at a time, so every frame keeps its
// bytes until it is released, and every buffer is counted once. Under ThreadSanitizer
// (scripts/check_sanitizers.sh --thread) this checks the pool's locking.
TEST(FramePool, FramesReleasedOnOtherThreadsKeepTheirBytes) {
  FramePool pool({.min_bytes = kMiB, .max_cached = 2});
  std::vector<std::unique_ptr<BatchMessage>> messages;
  for (uint8_t seed = 0; seed < 4; ++seed)
    messages.push_back(std::make_unique<BatchMessage>(kMiB + seed * 4096, seed));
  constexpr int kFrames = 48;
  std::vector<std::thread> releasers;
  for (int i = 0; i < kFrames; ++i) {
    BatchMessage& sent = *messages[static_cast<size_t>(i) % messages.size()];
    zmq::message_t frame = pool.frame_of(sent.builder);
    releasers.emplace_back([frame = std::move(frame), &sent]() mutable {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      expect_carries(std::move(frame), sent);  // checks, then releases the frame
    });
    if (releasers.size() == 6) {  // at most 6 frames in flight
      releasers.front().join();
      releasers.erase(releasers.begin());
    }
  }
  for (std::thread& t : releasers) t.join();
  const FramePool::Stats stats = pool.stats();
  EXPECT_EQ(stats.allocated + stats.reused, static_cast<uint64_t>(kFrames));
  EXPECT_GT(stats.reused, 0u);
  EXPECT_LE(stats.cached, 2u);
}

// A frame whose bytes start at `offset` of word-aligned memory, not freed by ZeroMQ.
zmq::message_t frame_at(std::vector<uint64_t>& memory, size_t offset, size_t size) {
  return zmq::message_t(reinterpret_cast<char*>(memory.data()) + offset, size, nullptr, nullptr);
}

TEST(AlignedFrame, KeepsALargeAlignedFrameAndCopiesAnyOther) {
  std::vector<uint64_t> memory(AlignedFrame::kKeptBytes / 8 + 2, 0x5a5a5a5a5a5a5a5aull);
  const size_t large = AlignedFrame::kKeptBytes;
  std::string why;
  const auto* base = reinterpret_cast<const char*>(memory.data());
  auto kept = AlignedFrame::adopt(frame_at(memory, 0, large), kExpect.max_frame_bytes, why);
  ASSERT_TRUE(kept) << why;
  EXPECT_EQ(reinterpret_cast<const char*>(kept->words().begin()), base);
  EXPECT_EQ(kept->size_bytes(), large);
  for (const auto& [offset, size] : {std::pair<size_t, size_t>{1, large}, {0, large - 8}}) {
    auto copied = AlignedFrame::adopt(frame_at(memory, offset, size), kExpect.max_frame_bytes, why);
    ASSERT_TRUE(copied) << why;
    const auto* words = reinterpret_cast<const char*>(copied->words().begin());
    EXPECT_NE(words, base + offset);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(words) % 8, 0u);
    EXPECT_EQ(std::memcmp(words, base + offset, size), 0);
  }
  // The size checks hold for a kept frame as for a copied one.
  EXPECT_FALSE(AlignedFrame::adopt(frame_at(memory, 0, large + 4), kExpect.max_frame_bytes, why));
  EXPECT_NE(why.find("whole number of 8-byte words"), std::string::npos) << why;
  EXPECT_FALSE(AlignedFrame::adopt(frame_at(memory, 0, large), large - 8, why));
  EXPECT_NE(why.find("exceeds the limit"), std::string::npos) << why;
}

}  // namespace
}  // namespace saccade::wire
