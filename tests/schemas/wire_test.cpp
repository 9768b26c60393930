#include "schemas/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace saccade::wire {
namespace {

constexpr size_t kLimit = 1 << 20;
const Expect kExpect{"job-a", kLimit};
const SenderInfo kFrom{"job-a", Role::LEARNER, 3, "node7"};

// A connected PAIR of real ZeroMQ sockets on loopback TCP.
struct Pair {
  zmq::context_t ctx;
  zmq::socket_t server{ctx, zmq::socket_type::pair};
  zmq::socket_t client{ctx, zmq::socket_type::pair};
  Pair() {
    server.set(zmq::sockopt::rcvtimeo, 5000);
    server.set(zmq::sockopt::linger, 0);
    client.set(zmq::sockopt::linger, 0);
    server.bind("tcp://127.0.0.1:*");
    client.connect(server.get(zmq::sockopt::last_endpoint));
  }
};

zmq::message_t heartbeat_message(int64_t step, const SenderInfo& from = kFrom) {
  capnp::MallocMessageBuilder builder;
  Envelope::Builder env = start_envelope(builder, from, 4, 17);
  Heartbeat::Builder hb = env.getBody().initHeartbeat();
  hb.setState(ActorState::RUNNING);
  hb.setStep(step);
  hb.setItemsPerSecond(123.5);
  return to_zmq(builder);
}

std::string bytes_of(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

TEST(Wire, RoundTripOverLoopback) {
  Pair p;
  p.client.send(heartbeat_message(42), zmq::send_flags::none);
  Received r = recv_message(p.server, kExpect);
  ASSERT_EQ(r.status, RecvStatus::kOk) << r.why;
  Envelope::Reader env = r.message->envelope();
  EXPECT_EQ(std::string(env.getJobId().cStr()), "job-a");
  EXPECT_EQ(env.getVersion(), PROTOCOL_VERSION);
  EXPECT_EQ(env.getGeneration(), 4u);
  EXPECT_EQ(env.getSeq(), 17u);
  EXPECT_EQ(env.getSender().getRole(), Role::LEARNER);
  EXPECT_EQ(env.getSender().getRank(), 3);
  EXPECT_EQ(std::string(env.getSender().getNode().cStr()), "node7");
  // Every envelope of a process carries its one random incarnation.
  EXPECT_NE(env.getSender().getIncarnation(), 0u);
  EXPECT_EQ(env.getSender().getIncarnation(), process_incarnation());
  EXPECT_GT(env.getSentAtNs(), 0);
  ASSERT_EQ(r.message->kind(), Envelope::Body::HEARTBEAT);
  EXPECT_STREQ(kind_name(r.message->kind()), "heartbeat");
  EXPECT_EQ(env.getBody().getHeartbeat().getStep(), 42);
  EXPECT_DOUBLE_EQ(env.getBody().getHeartbeat().getItemsPerSecond(), 123.5);
}

TEST(Wire, LargeTensorPayloadSurvives) {
  Pair p;
  std::vector<float> values(64 * 1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  {
    capnp::MallocMessageBuilder builder;
    Batch::Builder batch = start_envelope(builder, kFrom, 0, 1).getBody().initBatch();
    batch.setImages(8);
    Tensor::Builder t = batch.initTensors(1)[0];
    t.setName("patches");
    t.setDtype(DType::FLOAT32);
    auto shape = t.initShape(2);
    shape.set(0, 256);
    shape.set(1, 256);
    t.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(values.data()),
                           values.size() * sizeof(float)));
    p.client.send(to_zmq(builder), zmq::send_flags::none);
  }
  Received r = recv_message(p.server, kExpect);
  ASSERT_EQ(r.status, RecvStatus::kOk) << r.why;
  Tensor::Reader t = r.message->envelope().getBody().getBatch().getTensors()[0];
  ASSERT_EQ(t.getData().size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(t.getData().begin(), values.data(), t.getData().size()), 0);
}

TEST(Wire, TruncatedFramesAreRefused) {
  const std::string good = bytes_of(heartbeat_message(1));
  for (size_t cut : {good.size() - 1, good.size() - 8, good.size() / 2, size_t{8}, size_t{3}}) {
    Received r = open_frame(zmq::message_t(good.data(), cut), kExpect);
    EXPECT_EQ(r.status, RecvStatus::kRefused) << "cut at " << cut;
    EXPECT_FALSE(r.message.has_value());
    EXPECT_FALSE(r.why.empty());
  }
  EXPECT_NE(open_frame(zmq::message_t(good.data(), good.size() - 3), kExpect)
                .why.find("not a whole number"),
            std::string::npos);
}

TEST(Wire, GarbageFramesAreRefusedNeverCrash) {
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint64_t> words(1 + rng() % 64);
    for (auto& w : words) w = rng();
    Received r = open_frame(zmq::message_t(words.data(), words.size() * 8), kExpect);
    refused += r.status == RecvStatus::kRefused;
  }
  EXPECT_EQ(refused, 2000);
}

TEST(Wire, BitFlippedMessagesAreRefusedOrValid) {
  const std::string good = bytes_of(heartbeat_message(1));
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string bad = good;
    for (int flips = 0; flips < 3; ++flips)
      bad[rng() % bad.size()] ^= static_cast<char>(1 << (rng() % 8));
    Received r = open_frame(zmq::message_t(bad.data(), bad.size()), kExpect);
    if (r.status == RecvStatus::kOk) {
      // Whatever survived validation must be fully readable.
      (void)r.message->envelope().getSender().getNode();
      EXPECT_EQ(std::string(r.message->envelope().getJobId().cStr()), "job-a");
    } else {
      EXPECT_FALSE(r.why.empty());
    }
  }
}

TEST(Wire, OversizeFrameIsRefusedUnread) {
  std::vector<uint64_t> big(kLimit / 8 + 1, 0);
  Received r = open_frame(zmq::message_t(big.data(), big.size() * 8), kExpect);
  EXPECT_EQ(r.status, RecvStatus::kRefused);
  EXPECT_NE(r.why.find("exceeds the limit"), std::string::npos) << r.why;
  EXPECT_EQ(open_frame(zmq::message_t(), kExpect).why, "empty frame");
}

TEST(Wire, OtherJobAndOtherVersionAreRefused) {
  SenderInfo stranger = kFrom;
  stranger.job_id = "job-b";
  Received r = open_frame(heartbeat_message(1, stranger), kExpect);
  EXPECT_EQ(r.why, "job id \"job-b\" is not this job's (\"job-a\")");
  // The coordinator opens them (any_job) to answer with a Refusal, which any job accepts.
  Expect any = kExpect;
  any.any_job = true;
  EXPECT_EQ(open_frame(heartbeat_message(1, stranger), any).status, RecvStatus::kOk);
  capnp::MallocMessageBuilder refusal;
  start_envelope(refusal, stranger, 0, 0).getBody().initRefusal().setReason("not yours");
  Received refused = open_frame(to_zmq(refusal), kExpect);
  ASSERT_EQ(refused.status, RecvStatus::kOk) << refused.why;
  EXPECT_EQ(refused.message->kind(), Envelope::Body::REFUSAL);

  capnp::MallocMessageBuilder builder;
  start_envelope(builder, kFrom, 0, 0).setVersion(PROTOCOL_VERSION + 1);
  EXPECT_NE(open_frame(to_zmq(builder), kExpect).why.find("protocol version"), std::string::npos);
}

TEST(Wire, TrailingBytesAreRefused) {
  std::string bytes = bytes_of(heartbeat_message(1));
  bytes.append(16, '\0');
  EXPECT_NE(open_frame(zmq::message_t(bytes.data(), bytes.size()), kExpect).why.find("trailing"),
            std::string::npos);
}

TEST(Wire, MisalignedSourceIsCopiedAndRead) {
  const std::string good = bytes_of(heartbeat_message(99));
  std::vector<char> shifted(good.size() + 1);
  std::memcpy(shifted.data() + 1, good.data(), good.size());  // start at an odd address
  std::string why;
  auto frame = AlignedFrame::copy_of(shifted.data() + 1, good.size(), kLimit, why);
  ASSERT_TRUE(frame) << why;
  auto msg = Message::open(std::move(*frame), kExpect, why);
  ASSERT_TRUE(msg) << why;
  EXPECT_EQ(msg->envelope().getBody().getHeartbeat().getStep(), 99);
}

TEST(Wire, ExtraPartsAreDrainedAndTheSocketStaysInStep) {
  Pair p;
  p.client.send(heartbeat_message(1), zmq::send_flags::sndmore);
  p.client.send(zmq::str_buffer("junk"), zmq::send_flags::none);
  p.client.send(heartbeat_message(2), zmq::send_flags::none);
  Received bad = recv_message(p.server, kExpect);
  EXPECT_EQ(bad.status, RecvStatus::kRefused);
  EXPECT_NE(bad.why.find("multi-part"), std::string::npos);
  Received good = recv_message(p.server, kExpect);
  ASSERT_EQ(good.status, RecvStatus::kOk) << good.why;
  EXPECT_EQ(good.message->envelope().getBody().getHeartbeat().getStep(), 2);
}

TEST(Wire, RouterDealerCarriesIdentityThenFrame) {
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  router.set(zmq::sockopt::rcvtimeo, 5000);
  router.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  dealer.send(zmq::str_buffer("garbage!"), zmq::send_flags::none);
  dealer.send(heartbeat_message(5), zmq::send_flags::none);
  for (int expected_ok : {0, 1}) {
    zmq::message_t identity, frame;
    ASSERT_TRUE(router.recv(identity));
    ASSERT_TRUE(identity.more());
    ASSERT_TRUE(router.recv(frame));
    Received r = open_frame(std::move(frame), kExpect);
    EXPECT_EQ(r.status == RecvStatus::kOk, expected_ok == 1) << r.why;
  }
}

TEST(Wire, NothingArrivedIsNotAnError) {
  Pair p;
  Received r = recv_message(p.server, kExpect, zmq::recv_flags::dontwait);
  EXPECT_EQ(r.status, RecvStatus::kNothing);
}

}  // namespace
}  // namespace saccade::wire
