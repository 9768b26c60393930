// A BatchServer and a RemoteBatchSource over real loopback sockets and threads.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "control/control.h"
#include "dataloader/ssl_loader.h"
#include "test_data.h"
#include "tests/support/temp_dir.h"
#include "workers/data_plane/batch_client.h"
#include "workers/data_plane/batch_codec.h"
#include "workers/data_plane/data_actor.h"

namespace saccade::data_plane {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::GeneratedDataset;
using testing::small_views;

constexpr int64_t kBatch = 4;
constexpr uint64_t kSeed = 42;
const char* const kJob = "dp-test";

wire::Expect expect(size_t max_bytes = 8 << 20) {
  return {kJob, max_bytes};
}

// A BatchServer serving on its own thread until stop() or destruction.
class ServerThread {
 public:
  explicit ServerThread(std::shared_ptr<const data::Dataset> dataset,
                        control::Security security = {}, size_t max_bytes = 8 << 20,
                        std::string local_endpoint = "", data::ViewOptions views = small_views()) {
    BatchServerOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.local_endpoint = std::move(local_endpoint);
    o.security = std::move(security);
    o.sender = {kJob, wire::Role::DATA, 0, "n0"};
    o.expect = expect(max_bytes);
    o.threads = 2;
    server_ = std::make_unique<BatchServer>(std::move(dataset), std::move(views), o);
    thread_ = std::thread([this] { server_->serve([this] { return stop_.load(); }); });
  }
  ~ServerThread() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    server_.reset();  // closes the socket: the server is gone
  }
  const std::string& endpoint() const { return endpoint_ = server_->endpoint(), endpoint_; }
  BatchServer& server() { return *server_; }

 private:
  std::atomic<bool> stop_{false};
  std::unique_ptr<BatchServer> server_;
  std::thread thread_;
  mutable std::string endpoint_;
};

data::ShardOptions shard_of(int64_t n) {
  return {n, 1, 0, 5, true, false};
}

RemoteSourceOptions client_options(data::ShardOptions shard, std::vector<std::string> endpoints,
                                   control::Security security = {}) {
  RemoteSourceOptions o;
  o.endpoints = std::move(endpoints);
  o.shard = shard;
  o.views = small_views();
  o.batch_size = kBatch;
  o.seed = kSeed;
  o.queue_depth = 2;
  o.request_timeout = 300ms;
  o.security = std::move(security);
  o.sender = {kJob, wire::Role::LEARNER, 0, "n0"};
  o.expect = expect();
  return o;
}

// What the single-process loader gives for the same shard, start and seed.
std::vector<data::LoadedBatch> local_batches(std::shared_ptr<const data::Dataset> ds,
                                             data::DataPosition start, int n,
                                             const data::ViewOptions& views = small_views()) {
  data::SslLoader loader(ds, shard_of(ds->size()), start, views, {kBatch, 1, 1, kSeed});
  std::vector<data::LoadedBatch> out;
  for (int i = 0; i < n; ++i) out.push_back(loader.next());
  return out;
}

void expect_same(const data::LoadedBatch& local, const data::LoadedBatch& remote) {
  EXPECT_EQ(local.position, remote.position);
  testing::expect_same_batch(*local.batch, *remote.batch);
}

// Takes n batches, failing the test (not hanging) after 5 s.
std::vector<data::LoadedBatch> take(RemoteBatchSource& source, int n) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::vector<data::LoadedBatch> out;
  for (int i = 0; i < n; ++i) {
    auto b = source.next([&] { return std::chrono::steady_clock::now() > deadline; });
    if (!b) {
      ADD_FAILURE() << "no batch " << i << " within 5 s";
      break;
    }
    out.push_back(std::move(*b));
  }
  return out;
}

TEST(DataPlane, RemoteBatchesEqualTheLocalLoadersBitForBit) {
  auto ds = std::make_shared<GeneratedDataset>(23, std::vector<int64_t>{3, 4, 9});
  ServerThread server(ds);
  RemoteSourceOptions o = client_options(shard_of(23), {server.endpoint()});
  o.request_timeout = 3s;  // no request goes twice, even on a slow (sanitized) build
  RemoteBatchSource source(o, {0, 0});
  const auto remote = take(source, 13);  // two epochs and a bit (23 / 4)
  const auto local = local_batches(ds, {0, 0}, 13);
  ASSERT_EQ(remote.size(), 13u);
  for (size_t i = 0; i < remote.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same(local[i], remote[i]);
  }
  EXPECT_GE(source.skipped_corrupt(), 6u);  // 3 corrupt images, seen in two epochs
  EXPECT_EQ(source.resent(), 0u);
  EXPECT_EQ(source.dropped(), 0u);
}

// views.cut_on = "learner": the data actor ships each decoded image (downscaled to the cap)
// with every token's box, and the learner gets what its own loader would have made.
TEST(DataPlane, ImagesAndBoxesTravelWhenTheLearnerCuts) {
  data::ViewOptions views = small_views();
  views.cut_on_learner = true;
  views.ship_max_side = 50;  // the generated images are 20-74 pixels a side
  auto ds = std::make_shared<GeneratedDataset>(23, std::vector<int64_t>{4});
  ServerThread server(ds, {}, 8 << 20, "", views);
  RemoteSourceOptions o = client_options(shard_of(23), {server.endpoint()});
  o.views = views;
  RemoteBatchSource source(o, {0, 0});
  const auto remote = take(source, 7);
  const auto local = local_batches(ds, {0, 0}, 7, views);
  ASSERT_EQ(remote.size(), 7u);
  int capped = 0;
  for (size_t i = 0; i < remote.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same(local[i], remote[i]);
    ASSERT_EQ(remote[i].batch->images.size(), static_cast<size_t>(kBatch));
    EXPECT_TRUE(remote[i].batch->teacher_seq.pixels.empty());
    for (const data::ShippedImage& image : remote[i].batch->images) {
      EXPECT_LE(std::max(image.height, image.width), 50);
      capped += std::max(image.height, image.width) == 50;
    }
  }
  EXPECT_GT(capped, 0);  // some images were over the cap
  EXPECT_EQ(source.dropped(), 0u);
}

TEST(DataPlane, LearnersOnTheServersNodeGetTheSameBatchesOverIpc) {
  const saccade::testing::TempDir scratch("dp");
  const fs::path dir = scratch.path();
  const std::string ipc = "ipc://" + (dir / "job-7100" / "data-0").string();  // folder made by it
  auto ds = std::make_shared<GeneratedDataset>(23, std::vector<int64_t>{});
  {
    ServerThread server(ds, {}, 8 << 20, ipc);
    EXPECT_EQ(server.server().local_endpoint(), ipc);
    RemoteBatchSource near(client_options(shard_of(23), {ipc}), {0, 0});
    RemoteBatchSource far(client_options(shard_of(23), {server.endpoint()}), {0, 0});
    const auto over_ipc = take(near, 7), over_tcp = take(far, 7);
    const auto local = local_batches(ds, {0, 0}, 7);
    ASSERT_EQ(over_ipc.size(), 7u);
    ASSERT_EQ(over_tcp.size(), 7u);
    for (size_t i = 0; i < local.size(); ++i) {
      SCOPED_TRACE(i);
      expect_same(local[i], over_ipc[i]);
      expect_same(local[i], over_tcp[i]);
    }
  }
  EXPECT_FALSE(fs::exists(dir / "job-7100" / "data-0")) << "the socket file outlived its server";
  fs::remove_all(dir);
}

// Resuming and a data actor lost mid-run, on either cut side (views.cut_on): the data
// position and the batches do not depend on what travels.
class DataPlaneEitherSide : public ::testing::TestWithParam<bool> {
 protected:
  data::ViewOptions views() const {
    data::ViewOptions v = small_views();
    v.cut_on_learner = GetParam();
    v.ship_max_side = 64;
    return v;
  }
  RemoteSourceOptions options(int64_t n, std::vector<std::string> endpoints) const {
    RemoteSourceOptions o = client_options(shard_of(n), std::move(endpoints));
    o.views = views();
    return o;
  }
};

TEST_P(DataPlaneEitherSide, ResumesFromADataPositionExactly) {
  auto ds = std::make_shared<GeneratedDataset>(23);
  ServerThread server(ds, {}, 8 << 20, "", views());
  const auto local = local_batches(ds, {0, 0}, 8, views());
  RemoteBatchSource source(options(23, {server.endpoint()}), local[4].position);
  const auto remote = take(source, 3);
  ASSERT_EQ(remote.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_same(local[5 + i], remote[i]);
}

TEST_P(DataPlaneEitherSide, EveryBatchArrivesInOrderWhenAServerStopsMidRun) {
  auto ds = std::make_shared<GeneratedDataset>(40);
  ServerThread a(ds, {}, 8 << 20, "", views()), b(ds, {}, 8 << 20, "", views());
  RemoteBatchSource source(options(40, {a.endpoint(), b.endpoint()}), {0, 0});
  auto remote = take(source, 3);
  a.stop();
  for (auto& batch : take(source, 9)) remote.push_back(std::move(batch));
  const auto local = local_batches(ds, {0, 0}, 12, views());
  ASSERT_EQ(remote.size(), 12u);
  for (size_t i = 0; i < remote.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same(local[i], remote[i]);
  }
  EXPECT_GT(b.server().batches_served(), 0u);
}

INSTANTIATE_TEST_SUITE_P(CutOn, DataPlaneEitherSide, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Learner" : "Data";
                         });

// A data actor that takes requests and never answers.
class BlackHole {
 public:
  BlackHole() : socket_(context_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
  }
  std::string endpoint() { return socket_.get(zmq::sockopt::last_endpoint); }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

TEST(DataPlane, RequestsOfASilentServerAreResentToAnother) {
  auto ds = std::make_shared<GeneratedDataset>(30);
  BlackHole silent;
  ServerThread server(ds);
  RemoteBatchSource source(client_options(shard_of(30), {silent.endpoint(), server.endpoint()}),
                           {0, 0});
  // Sockets are `immediate`: requests go only to connected actors. Let both
  // connections come up, or on a loaded machine the live actor may serve all 8
  // before the silent one is ever asked.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto remote = take(source, 8);
  const auto local = local_batches(ds, {0, 0}, 8);
  ASSERT_EQ(remote.size(), 8u);
  for (size_t i = 0; i < remote.size(); ++i) expect_same(local[i], remote[i]);
  EXPECT_GT(source.resent(), 0u);
}

// A raw DEALER talking to a server.
class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send(zmq::message_t frame) { socket_.send(frame, zmq::send_flags::none); }
  void send_bytes(const std::string& bytes) { send(zmq::message_t(bytes.data(), bytes.size())); }
  // The next frame within 2 s, validated.
  wire::Received receive() {
    socket_.set(zmq::sockopt::rcvtimeo, 2000);
    return wire::recv_message(socket_, expect());
  }
  zmq::socket_t& socket() { return socket_; }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

zmq::message_t request(const std::string& job, uint64_t id, std::vector<int64_t> indices,
                       size_t seeds) {
  control::EnvelopeWriter writer({job, wire::Role::LEARNER, 0, "n0"});
  return writer.make(0, [&](wire::Envelope::Builder env) {
    auto r = env.getBody().initBatchRequest();
    r.setBatchId(id);
    auto list = r.initIndices(static_cast<unsigned>(indices.size()));
    for (unsigned i = 0; i < list.size(); ++i) list.set(i, indices[i]);
    r.initSeeds(static_cast<unsigned>(seeds));
  });
}

TEST(DataPlane, ServerDropsGarbageAndKeepsServing) {
  auto ds = std::make_shared<GeneratedDataset>(16);
  ServerThread server(ds, {}, 256 << 10);
  RawPeer peer(server.endpoint());
  peer.send_bytes("not a capnp message!!!!");       // garbage
  peer.send_bytes(std::string(64, '\xff'));         // garbage of whole words
  peer.send(request("another-job", 1, {0, 1}, 2));  // wrong job
  control::EnvelopeWriter writer({kJob, wire::Role::LEARNER, 0, "n0"});
  peer.send(writer.make(0, [](wire::Envelope::Builder env) { env.getBody().initHeartbeat(); }));
  peer.send(request(kJob, 2, {0, 16}, 2));                                // index out of range
  peer.send(request(kJob, 3, {0, 1}, 1));                                 // one seed for two images
  peer.send(request(kJob, 4, {}, 0));                                     // no image
  peer.send(request(kJob, 5, std::vector<int64_t>(400, 0), 400));         // an answer over 256 KiB
  peer.socket().send(zmq::str_buffer("part"), zmq::send_flags::sndmore);  // multi-part
  peer.socket().send(zmq::str_buffer("part"), zmq::send_flags::none);
  {
    RawPeer big(server.endpoint());  // a frame over maxmsgsize: the server hangs up on it
    big.send_bytes(std::string(512 << 10, '\0'));
    std::this_thread::sleep_for(50ms);
  }
  peer.send(request(kJob, 6, {2, 7}, 2));  // a good one, answered
  wire::Received r = peer.receive();
  ASSERT_EQ(r.status, wire::RecvStatus::kOk) << r.why;
  ASSERT_EQ(r.message->kind(), wire::Envelope::Body::BATCH);
  EXPECT_EQ(r.message->envelope().getBody().getBatch().getBatchId(), 6u);
  EXPECT_EQ(r.message->envelope().getSender().getRole(), wire::Role::DATA);
  std::string why;
  EXPECT_TRUE(read_batch(r.message->envelope().getBody().getBatch(), small_views(), 2, why)) << why;
  EXPECT_GE(server.server().dropped(), 9u);

  RemoteBatchSource source(client_options(shard_of(16), {server.endpoint()}), {0, 0});
  EXPECT_EQ(take(source, 3).size(), 3u);
}

// A data actor that answers every request with a garbage frame, a Batch of
// the wrong image count and a Batch of an id never asked for.
class BadServer {
 public:
  BadServer() : socket_(context_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { run(); });
  }
  ~BadServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  int answered() const { return answered_; }

 private:
  void run() {
    control::EnvelopeWriter writer({kJob, wire::Role::DATA, 1, "n0"});
    data::SslBatch wrong;
    wrong.allocate(small_views(), kBatch + 1);
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      control::poll_interruptible(&item, 1, 20ms);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, frame;
      if (!socket_.recv(id) || !socket_.recv(frame)) continue;
      wire::Received r = wire::open_frame(std::move(frame), expect());
      if (r.status != wire::RecvStatus::kOk) continue;
      const uint64_t batch_id = r.message->envelope().getBody().getBatchRequest().getBatchId();
      auto reply = [&](zmq::message_t m) {
        zmq::message_t to;
        to.copy(id);
        socket_.send(to, zmq::send_flags::sndmore);
        socket_.send(m, zmq::send_flags::none);
      };
      reply(zmq::message_t(std::string(24, 'x')));
      reply(writer.make(0, [&](wire::Envelope::Builder env) {
        write_batch(wrong, batch_id + 1000, {}, env.getBody().initBatch());
      }));
      reply(writer.make(0, [&](wire::Envelope::Builder env) {
        write_batch(wrong, batch_id, {}, env.getBody().initBatch());
      }));
      ++answered_;
    }
  }

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

TEST(DataPlane, ClientRefusesAMalformedBatchAndAsksAgain) {
  auto ds = std::make_shared<GeneratedDataset>(20);
  BadServer bad;
  ServerThread good(ds);
  RemoteBatchSource source(client_options(shard_of(20), {bad.endpoint(), good.endpoint()}), {0, 0});
  // Requests go to connected peers only: under load the good server can connect first and
  // serve the first batches alone, so batches are taken until the bad one has answered,
  // then 6 more (the requests it held are resent to the good one: batches come in order).
  std::vector<data::LoadedBatch> remote = take(source, 6);
  while (bad.answered() == 0 && remote.size() < 200) {
    std::vector<data::LoadedBatch> more = take(source, 1);
    if (more.empty()) break;
    remote.push_back(std::move(more.front()));
  }
  const size_t asked = remote.size();
  for (auto& b : take(source, 6)) remote.push_back(std::move(b));
  ASSERT_EQ(remote.size(), asked + 6);
  const auto local = local_batches(ds, {0, 0}, static_cast<int>(remote.size()));
  for (size_t i = 0; i < remote.size(); ++i) expect_same(local[i], remote[i]);
  EXPECT_GT(bad.answered(), 0);
  EXPECT_GT(source.resent(), 0u);
  EXPECT_GT(source.dropped(), 0u);
}

TEST(DataPlane, NextReturnsWhenStoppingWithNoServer) {
  BlackHole silent;
  RemoteBatchSource source(client_options(shard_of(20), {silent.endpoint()}), {0, 0});
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + 400ms;
  EXPECT_FALSE(source.next([&] { return std::chrono::steady_clock::now() > until; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 700ms);
}

struct CurvePair {
  control::Security server, client;
};

CurvePair curve(const control::CurveKeys& client_keys) {
  const control::CurveKeys server_keys = control::generate_curve_keys();
  const control::CurveKeys allowed = control::generate_curve_keys();
  CurvePair p;
  p.server = {true, server_keys.public_key, server_keys.secret_key, {allowed.public_key, ""}};
  p.client = {true, server_keys.public_key, "",
              client_keys.public_key.empty() ? allowed : client_keys};
  return p;
}

TEST(DataPlane, CurveAdmitsTheJobsClientKeyOnly) {
  auto ds = std::make_shared<GeneratedDataset>(12);
  {
    const CurvePair keys = curve({});
    ServerThread server(ds, keys.server);
    RemoteBatchSource source(client_options(shard_of(12), {server.endpoint()}, keys.client),
                             {0, 0});
    EXPECT_EQ(take(source, 2).size(), 2u);
  }
  {
    const CurvePair keys = curve(control::generate_curve_keys());  // not the job's client key
    ServerThread server(ds, keys.server);
    RemoteBatchSource source(client_options(shard_of(12), {server.endpoint()}, keys.client),
                             {0, 0});
    const auto until = std::chrono::steady_clock::now() + 500ms;
    EXPECT_FALSE(source.next([&] { return std::chrono::steady_clock::now() > until; }));
    EXPECT_EQ(server.server().batches_served(), 0u);
  }
}

}  // namespace
}  // namespace saccade::data_plane
