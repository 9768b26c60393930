// GRPO rollouts on rollout actors: the group codec, and RolloutServer /
// RolloutClient over real loopback sockets, checked against LocalRollouts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <capnp/message.h>

#include "control/control.h"
#include "model/policy.h"
#include "model/weights.h"
#include "storage/rollout_store.h"
#include "tests/support/temp_dir.h"
#include "tests/workers/small_models.h"
#include "workers/policy/policy_trainer.h"
#include "workers/policy/rollout_client.h"
#include "workers/policy/rollout_codec.h"
#include "workers/policy/rollout_server.h"
#include "workers/policy/rollout_source.h"

namespace saccade::policy {
namespace {

using saccade::testing::OneClassDataset;
using saccade::testing::small_backbone;
using saccade::testing::small_policy;
using saccade::testing::small_views;

constexpr const char* kJob = "rollout-test";

// The paper's transformer head (the probe's probe.head = "transformer"): what the
// actors reward with must be what one process rewards with, every state token included.
probe::TaskHead seeded_head() {
  torch::manual_seed(2);
  return probe::TaskHead(saccade::testing::small_transformer_head(16, 2, 2));
}

RolloutBatch batch_of(std::vector<int64_t> indices, uint64_t version, uint64_t seed) {
  RolloutBatch b;
  b.policy_version = version;
  b.indices = std::move(indices);
  b.trace.steps = 3;
  b.trace.group = 3;
  b.trace.source = GazeSource::kPolicySample;
  b.trace.std = 0.2;
  for (int64_t i : b.indices) b.trace.image_seeds.push_back(seed * 1000 + static_cast<uint64_t>(i));
  return b;
}

void expect_same_traces(const Traces& got, const Traces& want) {
  ASSERT_EQ(got.states.sizes(), want.states.sizes());
  EXPECT_TRUE(torch::allclose(got.states, want.states, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(got.extent, want.extent));
  EXPECT_TRUE(torch::allclose(got.gazes, want.gazes, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(got.log_prob, want.log_prob, 1e-4, 1e-4));
  EXPECT_TRUE(torch::allclose(got.rewards, want.rewards, 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(got.correct, want.correct));
}

// A rollout actor serving on a thread of the test, on its own backbone copy.
class ServerThread {
 public:
  explicit ServerThread(std::shared_ptr<const data::Dataset> dataset)
      : backbone_(small_backbone()), head_(seeded_head()) {
    RolloutServerOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.sender = {kJob, wire::Role::ROLLOUT, 0, "n0"};
    o.expect = {kJob, 64 << 20};
    server_ = std::make_unique<RolloutServer>(*backbone_, head_, small_policy()->options(),
                                              std::move(dataset), small_views(), o);
    thread_ = std::thread([this] { server_->serve([this] { return stop_.load(); }); });
  }
  ~ServerThread() {
    stop_ = true;
    thread_.join();
  }
  RolloutServer& server() { return *server_; }

 private:
  model::FovealBackbone backbone_;
  probe::TaskHead head_;
  std::unique_ptr<RolloutServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

RolloutClientOptions client_options(std::vector<std::string> endpoints) {
  RolloutClientOptions o;
  o.endpoints = std::move(endpoints);
  o.n_state = 2;
  o.width = 16;
  o.request_timeout = std::chrono::milliseconds(20000);
  o.sender = {kJob, wire::Role::LEARNER, 0, "n0"};
  o.expect = {kJob, 64 << 20};
  return o;
}

// Two rollout actors over loopback and, beside them, one process's rollouts of
// the same images, backbone and head: what the actors return must be what it returns.
struct TwoActorsBesideOneProcess {
  explicit TwoActorsBesideOneProcess(int64_t images)
      : dataset(std::make_shared<OneClassDataset>(images, /*noise=*/true)),
        a(dataset),
        b(dataset),
        client(client_options({a.server().endpoint(), b.server().endpoint()})),
        bb(small_backbone()),
        head(seeded_head()),
        local(*bb, head, *dataset, small_views()),
        pi(small_policy()) {}

  std::shared_ptr<OneClassDataset> dataset;
  ServerThread a, b;
  RolloutClient client;
  model::FovealBackbone bb;
  probe::TaskHead head;
  LocalRollouts local;  // borrows bb and *dataset
  model::GazePolicy pi;
};

TEST(RolloutCodec, GroupsRoundTripAndBadOnesAreRefusedByName) {
  OneClassDataset dataset(4, /*noise=*/true);
  model::FovealBackbone bb = small_backbone();
  const probe::TaskHead head = seeded_head();
  model::GazePolicy pi = small_policy();
  LocalRollouts local(*bb, head, dataset, small_views());
  const Traces tr = local.run(pi.get(), batch_of({2, 0, 3}, 0, 1));
  const RolloutShape shape{3, 3, 2, 16};
  EXPECT_EQ(rollout_group_bytes(shape), 3u * 3 * 2 * 16 * 4 + 2 * 4 + 3 * 3 * (2 + 1 + 1) * 4 + 9);

  std::vector<Traces> groups;
  for (int64_t b = 0; b < 3; ++b) {
    capnp::MallocMessageBuilder builder;
    auto g = builder.initRoot<wire::RolloutGroup>();
    write_rollout_group(tr, b, 3, g);
    std::string why;
    std::optional<Traces> back = read_rollout_group(g.asReader(), shape, why);
    ASSERT_TRUE(back) << why;
    groups.push_back(std::move(*back));
  }
  const Traces joined = concat_traces(groups);
  EXPECT_TRUE(torch::equal(joined.states, tr.states));
  EXPECT_TRUE(torch::equal(joined.gazes, tr.gazes));
  EXPECT_TRUE(torch::equal(joined.log_prob, tr.log_prob));
  EXPECT_TRUE(torch::equal(joined.rewards, tr.rewards));
  EXPECT_TRUE(torch::equal(joined.correct, tr.correct));
  EXPECT_TRUE(torch::equal(joined.extent, tr.extent));

  std::string why;
  const std::string bytes = encode_rollout_group(tr, 1, 3, 7, 0);
  std::optional<Traces> decoded = decode_rollout_group(bytes, shape, why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_TRUE(torch::equal(decoded->states, tr.states.slice(1, 3, 6)));
  // Another shape than expected, garbage, a reward outside [0, 1]: refused, with the reason.
  EXPECT_FALSE(decode_rollout_group(bytes, RolloutShape{4, 3, 2, 16}, why));
  EXPECT_NE(why.find("\"states\" has shape [3, 3, 2, 16], expected [4, 3, 2, 16]"),
            std::string::npos)
      << why;
  EXPECT_FALSE(decode_rollout_group(std::string(64, '\x7f'), shape, why));
  EXPECT_FALSE(why.empty());
  Traces bad = tr;
  bad.rewards = tr.rewards.clone();
  bad.rewards[0][3] = 2.0f;
  EXPECT_FALSE(decode_rollout_group(encode_rollout_group(bad, 1, 3, 7, 0), shape, why));
  EXPECT_NE(why.find("reward"), std::string::npos) << why;
  EXPECT_THROW(encode_rollout_group(tr, 3, 3, 0, 0), std::invalid_argument);
}

TEST(Rollouts, ActorsRunWhatOneProcessRunsAndTrainTheSamePolicy) {
  TwoActorsBesideOneProcess rollouts(7);
  auto& [dataset, a, b, client, bb, head, local, pi] = rollouts;

  // Five images over two actors (2 + 3), then new weights under a new version.
  const RolloutBatch first = batch_of({4, 1, 6, 0, 2}, 0, 1);
  expect_same_traces(client.run(pi.get(), first), local.run(pi.get(), first));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : pi->parameters()) p.add_(0.3 * torch::randn_like(p));
  }
  const RolloutBatch second = batch_of({3, 5, 1}, 1, 2);
  const Traces remote = client.run(pi.get(), second);
  expect_same_traces(remote, local.run(pi.get(), second));
  // One image alone on one actor draws what it drew in the batch.
  expect_same_traces(client.run(pi.get(), batch_of({5}, 1, 2)),
                     local.run(pi.get(), batch_of({5}, 1, 2)));
  EXPECT_EQ(a.server().requests_served() + b.server().requests_served(), 5u);
  EXPECT_EQ(client.resent(), 0u);
  EXPECT_EQ(client.dropped(), 0u);

  // GRPO through the actors trains the policy GRPO in one process trains,
  // and the recorded rollouts read back as what was trained on.
  PolicyTrainOptions o;
  o.epochs = 1;
  o.batch_size = 4;
  o.group = 3;
  o.steps = 2;
  o.updates = 2;
  o.lr = 1e-2;
  o.seed = 5;
  model::GazePolicy trained_local = small_policy(), trained_remote = small_policy();
  train_policy(local, *trained_local, dataset->size(), o);
  const testing::TempDir scratch("rollouts");
  const std::filesystem::path db = scratch.path() / "rollouts.db";
  {
    auto store = storage::RolloutStore::open(db.string(), 0);
    RecordedRollouts recorded(client, *store);
    const auto epochs = train_policy(recorded, *trained_remote, dataset->size(), o);
    ASSERT_EQ(epochs.size(), 1u);
    EXPECT_EQ(epochs[0].images, 7);
    EXPECT_EQ(store->versions(), (std::vector<uint64_t>{0, 1}));  // 2 rollout batches
    const storage::RolloutStore::Groups v1 = store->read(1);
    ASSERT_EQ(v1.size(), 3u);  // the last 3 of 7 images
    std::string why;
    for (const auto& [image, bytes] : v1) {
      ASSERT_LT(image, 7u);
      const auto g = decode_rollout_group(bytes, RolloutShape{2, 3, 2, 16}, why);
      ASSERT_TRUE(g) << why;
      EXPECT_TRUE((g->rewards >= 0).all().item<bool>());
    }
  }
  std::filesystem::remove_all(db);
  const auto want = trained_local->named_parameters();
  double moved = 0;
  // Equal up to float noise, which Adam scales up to ~1e-4 where a gradient is
  // exactly zero in theory (the key bias); a policy trained on other rollouts
  // differs by ~lr = 1e-2.
  for (const auto& p : trained_remote->named_parameters()) {
    EXPECT_TRUE(torch::allclose(p.value(), want[p.key()], 1e-3, 3e-4))
        << p.key() << " differs by " << (p.value() - want[p.key()]).abs().max().item<double>();
    moved += (p.value() - small_policy()->named_parameters()[p.key()]).abs().sum().item<double>();
  }
  EXPECT_GT(moved, 1e-3);  // training did change the policy
}

// The eval stage's protocol: evaluate_gazes on eval actors (rollout servers of
// the validation split) measures what it measures in one process, in every
// gaze mode and at every scale of the resolution sweep.
TEST(Rollouts, EvaluationOnActorsMeasuresWhatOneProcessMeasuresAtEveryScale) {
  TwoActorsBesideOneProcess rollouts(9);
  auto& [dataset, a, b, client, bb, head, local, pi] = rollouts;
  GazeEvalOptions o;
  o.steps = 3;
  o.batch_size = 4;  // 9 images in 3 batches, each split over both actors
  o.seed = 11;
  o.policy_version = 1;
  for (const double scale : {1.0, 2.5}) {
    o.scale = scale;
    o.bilinear_upscale = scale != 1;
    for (const GazeSource source :
         {GazeSource::kRandom, GazeSource::kScan, GazeSource::kPolicyMode}) {
      const GazeEvaluation remote = evaluate_gazes(client, pi.get(), source, dataset->size(), o);
      const GazeEvaluation here = evaluate_gazes(local, pi.get(), source, dataset->size(), o);
      EXPECT_EQ(remote.accuracy, here.accuracy) << "x" << scale;
      ASSERT_EQ(remote.gaze_spread.size(), 3u);
      for (size_t t = 0; t < 3; ++t)
        EXPECT_NEAR(remote.gaze_spread[t], here.gaze_spread[t], 1e-6) << "x" << scale;
      ASSERT_EQ(remote.mixture_entropy.size(), source == GazeSource::kPolicyMode ? 3u : 0u);
      for (size_t t = 0; t < remote.mixture_entropy.size(); ++t)
        EXPECT_NEAR(remote.mixture_entropy[t], here.mixture_entropy[t], 1e-5) << "x" << scale;
    }
  }
  // 6 evaluations of batches of 4, 4 and 1 images: parts of 2 + 2 + 1 images each.
  EXPECT_EQ(a.server().requests_served() + b.server().requests_served(), 6u * 5);
  // The scale reaches the actors: a batch at x2.5 is the local x2.5 batch, not the x1 one.
  RolloutBatch resized = batch_of({1, 7}, 1, 3);
  resized.scale = 2.5;
  resized.bilinear_upscale = true;
  const Traces remote = client.run(pi.get(), resized);
  expect_same_traces(remote, local.run(pi.get(), resized));
  EXPECT_FALSE(torch::equal(remote.states, local.run(pi.get(), batch_of({1, 7}, 1, 3)).states));
  resized.scale = 100;
  EXPECT_THROW(local.run(pi.get(), resized), std::invalid_argument);
  EXPECT_THROW(local.run(nullptr, batch_of({1}, 1, 3)), std::invalid_argument);  // needs a policy
  EXPECT_EQ(client.dropped(), 0u);
}

TEST(Rollouts, ASilentActorsPartGoesToAnotherAndBadFramesAreDropped) {
  auto dataset = std::make_shared<OneClassDataset>(5, /*noise=*/true);
  ServerThread live(dataset);
  // An actor that takes requests and never answers.
  zmq::context_t silent_context;
  zmq::socket_t silent(silent_context, zmq::socket_type::router);
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  RolloutClientOptions o =
      client_options({silent.get(zmq::sockopt::last_endpoint), live.server().endpoint()});
  o.request_timeout = std::chrono::milliseconds(300);
  RolloutClient client(o);
  // Sockets are `immediate`: parts go only to connected actors. Let both
  // connections come up, or the live actor may serve both parts before the
  // silent one is ever asked.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  model::FovealBackbone bb = small_backbone();
  const probe::TaskHead head = seeded_head();
  LocalRollouts local(*bb, head, *dataset, small_views());
  model::GazePolicy pi = small_policy();
  const RolloutBatch batch = batch_of({0, 1, 2, 3}, 4, 3);
  expect_same_traces(client.run(pi.get(), batch), local.run(pi.get(), batch));
  EXPECT_EQ(client.resent(), 1u);  // the silent actor's half, once
  EXPECT_EQ(live.server().requests_served(), 2u);

  // Garbage, a request for weights the actor never got, an image or a scale out of range.
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::rcvtimeo, 5000);
  raw.connect(live.server().endpoint());
  const uint64_t dropped = live.server().dropped();
  raw.send(zmq::str_buffer("not a capnp message"), zmq::send_flags::none);
  control::EnvelopeWriter writer({kJob, wire::Role::LEARNER, 0, "n0"});
  auto request = [&](uint64_t version, uint64_t image, double scale = 1) {
    return writer.make(0, [&](wire::Envelope::Builder out) {
      auto r = out.getBody().initRolloutRequest();
      r.setScale(scale);
      r.setPolicyVersion(version);
      r.setRequestId(1);
      r.setGroupSize(2);
      r.setSteps(2);
      r.setStd(0.1);
      r.initImageIds(1).set(0, image);
      r.initSeeds(1).set(0, 1);
    });
  };
  raw.send(request(0, 99), zmq::send_flags::none);        // image 99 of 5
  raw.send(request(0, 0, 0.0), zmq::send_flags::none);    // images resized to nothing
  raw.send(request(0, 0, 100.0), zmq::send_flags::none);  // beyond kMaxRolloutScale
  raw.send(request(99, 0), zmq::send_flags::none);        // version 99: never sent
  wire::Received r = wire::recv_message(raw, {kJob, 64 << 20});
  ASSERT_EQ(r.status, wire::RecvStatus::kOk) << r.why;
  ASSERT_EQ(r.message->kind(), wire::Envelope::Body::ACK);
  const auto ack = r.message->envelope().getBody().getAck();
  EXPECT_FALSE(ack.getOk());
  EXPECT_NE(std::string(ack.getError()).find("version 99"), std::string::npos);
  EXPECT_EQ(live.server().dropped(), dropped + 4);
  // The actor still serves.
  expect_same_traces(client.run(pi.get(), batch_of({4}, 4, 3)),
                     local.run(pi.get(), batch_of({4}, 4, 3)));
}

TEST(PolicyTraining, AResumedRunTrainsExactlyWhatTheWholeRunTrains) {
  OneClassDataset dataset(7, /*noise=*/true);
  model::FovealBackbone bb = small_backbone();
  LocalRollouts local(*bb, seeded_head(), dataset, small_views());
  PolicyTrainOptions o;
  o.epochs = 2;  // 3 batches of 3, 3, 1 images per epoch: 6 in all
  o.batch_size = 3;
  o.group = 3;
  o.steps = 2;
  o.updates = 2;
  o.lr = 1e-2;
  o.kl_beta = 0.1;
  o.seed = 6;
  struct Snapshot {
    int64_t done;
    std::string policy, optimizer;
  };
  std::vector<Snapshot> saved;
  model::GazePolicy whole = small_policy();
  PolicyProgress every2;
  every2.checkpoint_every = 2;
  every2.on_checkpoint = [&](int64_t done, const std::string& optimizer) {
    saved.push_back({done, model::save_modules({{"", whole.get()}}), optimizer});
  };
  train_policy(local, *whole, dataset.size(), o, {}, every2);
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[0].done, 2);
  EXPECT_EQ(saved[2].done, 6);

  // Resume mid-epoch 2 from the checkpoint after 4 batches, KL to the initial policy.
  model::GazePolicy resumed = small_policy(), reference = small_policy();
  model::load_modules({{"", resumed.get()}}, saved[1].policy);
  PolicyProgress from4;
  from4.start_update = 4;
  from4.optimizer_state = saved[1].optimizer;
  from4.reference = reference.get();
  const auto epochs = train_policy(local, *resumed, dataset.size(), o, {}, from4);
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0].epoch, 1);
  EXPECT_EQ(epochs[0].images, 3 + 1);  // the epoch's last two batches
  const auto want = whole->named_parameters();
  for (const auto& p : resumed->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();

  // A run that is asked to stop checkpoints where it stands and returns.
  model::GazePolicy stopped = small_policy();
  int64_t batches = 0, last = -1;
  PolicyProgress stop;
  stop.stopping = [&] { return batches++ >= 3; };
  stop.on_checkpoint = [&](int64_t done, const std::string&) { last = done; };
  EXPECT_EQ(train_policy(local, *stopped, dataset.size(), o, {}, stop).size(), 1u);
  EXPECT_EQ(last, 3);
  PolicyProgress past_the_end;
  past_the_end.start_update = 7;
  EXPECT_THROW(train_policy(local, *stopped, dataset.size(), o, {}, past_the_end),
               std::invalid_argument);
}

}  // namespace
}  // namespace saccade::policy
