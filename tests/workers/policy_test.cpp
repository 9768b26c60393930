// The policy stage's pieces: gaze traces of the frozen backbone, GRPO training
// of the gaze policy and the per-step evaluation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/backbone.h"
#include "model/policy.h"
#include "tests/workers/small_models.h"
#include "workers/policy/gaze_traces.h"
#include "workers/policy/policy_trainer.h"
#include "workers/policy/rollout_source.h"
#include "workers/probe/probe.h"
#include "workers/ssl/view_tensors.h"

namespace saccade::policy {
namespace {

using saccade::testing::small_backbone;
using saccade::testing::small_views;

using saccade::testing::OneClassDataset;

model::GazePolicy policy() {
  return saccade::testing::small_policy();
}

std::vector<data::GlimpseCutter> cutters(const data::Dataset& d, int64_t n,
                                         std::vector<int64_t>* labels, int threads = 1) {
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) indices.push_back(i);
  return load_glimpse_cutters(d, small_views(), indices, threads, labels);
}

// Three noisy images labelled 0, 1, 0, a small backbone and policy, and a
// random head drawn after torch::manual_seed(seed): what the trace tests run on.
struct TraceSetup {
  OneClassDataset dataset{3, /*noise=*/true};
  model::FovealBackbone bb = small_backbone();
  model::GazePolicy pi = policy();
  probe::TaskHead head;
  std::vector<int64_t> labels;
  std::vector<data::GlimpseCutter> images;
  explicit TraceSetup(uint64_t seed) {
    torch::manual_seed(seed);
    head = probe::TaskHead{torch::randn({2, 16}), torch::randn({2})};
    images = cutters(dataset, 3, &labels);
    labels = {0, 1, 0};
  }
};

TEST(GazeTraces, RecordWhatThePolicyReadAndWhatTheHeadSaid) {
  TraceSetup setup(2);
  auto& [dataset, bb, pi, head, labels, images] = setup;
  TraceOptions o;
  o.steps = 3;
  o.group = 4;
  o.source = GazeSource::kPolicySample;
  o.std = 0.2;
  o.seed = 9;
  const Traces tr = run_traces(*bb, head, pi.get(), images, labels, o);
  const int64_t T = 3, N = 12;
  ASSERT_EQ(tr.states.sizes(), (std::vector<int64_t>{T, N, 2, 16}));
  ASSERT_EQ(tr.gazes.sizes(), (std::vector<int64_t>{T, N, 2}));
  ASSERT_EQ(tr.rewards.sizes(), (std::vector<int64_t>{T, N}));
  EXPECT_TRUE(tr.extent.select(1, 0).eq(1.0f).all().item<bool>());
  EXPECT_TRUE(tr.extent.select(1, 1).eq(1.25f).all().item<bool>());
  EXPECT_TRUE(tr.gazes.ge(0).all().item<bool>());
  EXPECT_TRUE(tr.gazes.select(2, 0).le(1.0f).all().item<bool>());
  EXPECT_TRUE(tr.gazes.select(2, 1).le(1.25f).all().item<bool>());
  EXPECT_EQ(tr.states[0].abs().max().item<float>(), 0.0f) << "the first gaze reads the zero state";
  EXPECT_TRUE(bb->is_training() && pi->is_training()) << "modes are restored";

  torch::NoGradGuard no_grad;
  const torch::Tensor label_of_row = torch::tensor(labels).repeat_interleave(4);
  for (int64_t t = 0; t < T; ++t) {
    // GRPO's first update has ratio 1: the stored log-density is the policy's on the stored state.
    const torch::Tensor lp = pi->distribution(tr.states[t], tr.extent, o.std).log_prob(tr.gazes[t]);
    EXPECT_TRUE(torch::allclose(lp, tr.log_prob[t], 1e-4, 1e-4)) << "step " << t;
    if (t + 1 < T) {  // the reward is the head's belief in the true class on the next state
      const torch::Tensor p = torch::softmax(
          torch::addmm(head.bias, tr.states[t + 1].select(1, 0), head.weight.t()), 1);
      const torch::Tensor expected = p.gather(1, label_of_row.view({-1, 1})).squeeze(1);
      EXPECT_TRUE(torch::allclose(expected, tr.rewards[t], 1e-5, 1e-6)) << "step " << t;
      EXPECT_TRUE(p.argmax(1).eq(label_of_row).equal(tr.correct[t]));
    }
  }
  // Traces of one group look at different places; the same seed replays them on any thread count.
  EXPECT_FALSE(torch::allclose(tr.gazes[0][0], tr.gazes[0][1]));
  o.threads = 2;
  const Traces again = run_traces(*bb, head, pi.get(), images, labels, o);
  EXPECT_TRUE(torch::equal(again.gazes, tr.gazes));
  EXPECT_TRUE(torch::allclose(again.rewards, tr.rewards, 1e-6, 1e-7));
  o.seed = 10;
  EXPECT_FALSE(torch::equal(run_traces(*bb, head, pi.get(), images, labels, o).gazes, tr.gazes));

  // The policy's mode ignores the group: from the zero state every trace starts at one point.
  o.source = GazeSource::kPolicyMode;
  const Traces mode = run_traces(*bb, head, pi.get(), images, labels, o);
  EXPECT_TRUE(torch::allclose(mode.gazes[0], mode.gazes[0][0].expand({N, 2})));
  o.source = GazeSource::kRandom;
  const Traces random = run_traces(*bb, head, nullptr, images, labels, o);
  EXPECT_EQ(random.log_prob.abs().max().item<float>(), 0.0f);
  EXPECT_FALSE(torch::allclose(random.gazes[0][0], random.gazes[0][1]));

  // The fixed scan path needs no policy: the centre first, then the grid's other cells, the
  // same for every trace of an image, and a different point at every glimpse.
  o.source = GazeSource::kScan;
  o.steps = 3;
  const Traces scan = run_traces(*bb, head, nullptr, images, labels, o);
  for (int64_t n = 0; n < N; ++n) {
    const auto e = scan.extent[n];
    EXPECT_TRUE(torch::allclose(scan.gazes[0][n], e / 2)) << "trace " << n;
    const auto [x1, y1] = scan_gaze(1, e[0].item<float>(), e[1].item<float>());
    EXPECT_NEAR(scan.gazes[1][n][0].item<float>(), x1, 1e-6);
    EXPECT_NEAR(scan.gazes[1][n][1].item<float>(), y1, 1e-6);
  }
  EXPECT_FALSE(torch::allclose(scan.gazes[1], scan.gazes[2]));
  EXPECT_EQ(scan.log_prob.abs().max().item<float>(), 0.0f);
  EXPECT_EQ(scan_gaze(0, 3.0f, 6.0f), std::make_pair(1.5f, 3.0f));
  EXPECT_EQ(scan_gaze(1, 3.0f, 6.0f), std::make_pair(0.5f, 1.0f));  // top-left cell
  EXPECT_EQ(scan_gaze(8, 3.0f, 6.0f), std::make_pair(2.5f, 5.0f));  // bottom-right cell
  EXPECT_EQ(scan_gaze(9, 3.0f, 6.0f), scan_gaze(0, 3.0f, 6.0f));    // then again
}

// Glimpse 1 of a trace is glimpse 1 of pretraining and of the probe: the backbone starts
// from no state. With memory tokens a zero state adds tokens it was never trained on
// (policy stages that started from a zero state scored glimpse 1 near chance).
TEST(GazeTraces, TheFirstGlimpseStartsFromNoStateAsInPretraining) {
  for (const auto input : {model::BackboneOptions::StateInput::kMemory,
                           model::BackboneOptions::StateInput::kProjected}) {
    model::BackboneOptions bo = small_backbone()->options();
    bo.state_input = input;
    torch::manual_seed(3);
    model::FovealBackbone bb(bo);
    bb->eval();
    {  // as if trained: the zero-initialised projection and embeddings no longer zero
      torch::NoGradGuard no_grad;
      for (auto& p : bb->parameters()) p.add_(0.1 * torch::randn_like(p));
    }
    OneClassDataset dataset{3, /*noise=*/true};
    data::ViewOptions views = small_views();
    views.fovea_zoom_max = views.fovea_zoom_min;  // the zoom a trace draws is then known
    std::vector<int64_t> labels;
    const auto images = load_glimpse_cutters(dataset, views, {0, 1, 2}, 1, &labels);
    labels = {0, 1, 0};
    TraceOptions o;
    o.steps = 2;
    o.group = 1;
    o.source = GazeSource::kRandom;
    const Traces tr = run_traces(*bb, probe::TaskHead{torch::randn({2, 16}), torch::randn({2})},
                                 nullptr, images, labels, o);

    data::PatchBatch glimpse;
    glimpse.resize(3, views.glimpse_tokens(), views.channels, views.patch_size);
    for (int64_t n = 0; n < 3; ++n)
      images[n].cut(tr.gazes[0][n][0].item<float>(), tr.gazes[0][n][1].item<float>(),
                    views.fovea_zoom_min, glimpse, n);
    const ssl::ViewTensors v = ssl::to_tensors(glimpse, torch::kCPU);
    torch::NoGradGuard no_grad;
    const torch::Tensor started = bb->step(v.patches, v.positions).state;
    const torch::Tensor from_zeros = bb->step(v.patches, v.positions, bb->initial_state(3)).state;
    ASSERT_FALSE(torch::allclose(started, from_zeros, 1e-3, 1e-3))
        << "the test must tell them apart: " << model::state_input_name(input);
    EXPECT_TRUE(torch::allclose(tr.states[1], started, 1e-5, 1e-6))
        << "state input " << model::state_input_name(input);
  }
}

TEST(GazeTraces, ATransformerHeadRewardsWhatItSaysOnEveryStateToken) {
  TraceSetup setup(3);
  auto& [dataset, bb, pi, linear, labels, images] = setup;
  const probe::TaskHead head(saccade::testing::small_transformer_head(16, 2, 2));
  TraceOptions o;
  o.steps = 3;
  o.group = 2;
  o.source = GazeSource::kPolicySample;
  o.seed = 4;
  const Traces tr = run_traces(*bb, head, pi.get(), images, labels, o);
  const torch::Tensor label_of_row = torch::tensor(labels).repeat_interleave(2);
  for (int64_t t = 0; t + 1 < o.steps; ++t) {
    const torch::Tensor logits = head.logits(tr.states[t + 1]);
    const torch::Tensor p = torch::softmax(logits, 1).gather(1, label_of_row.view({-1, 1}));
    EXPECT_TRUE(torch::allclose(p.squeeze(1), tr.rewards[t], 1e-5, 1e-6)) << "step " << t;
    // Not the first-token reading a linear head would give.
    const torch::Tensor other = head.logits(torch::stack(
        {tr.states[t + 1].select(1, 0),
         torch::zeros_like(tr.states[t + 1][0][0]).expand_as(tr.states[t + 1].select(1, 1))},
        1));
    EXPECT_FALSE(torch::allclose(other, logits, 1e-4, 1e-4)) << "the second token counts";
  }
  EXPECT_THROW(run_traces(*bb, probe::TaskHead(saccade::testing::small_transformer_head(16, 3, 2)),
                          pi.get(), images, labels, o),
               std::invalid_argument);
}

// A state-blind policy reads the glimpse's one-hot code instead of the state:
// every image gets the same gaze at a glimpse (one fixed path), the recorded
// states are the codes (what the trainer reads again), and the path moves.

TEST(GazeTraces, AStateBlindPolicyLooksAtTheSamePlacesInEveryImage) {
  TraceSetup setup(4);
  auto& [dataset, bb, pi, head, labels, images] = setup;
  TraceOptions o;
  o.steps = 3;
  o.group = 2;
  o.source = GazeSource::kPolicyMode;
  o.seed = 9;
  const Traces seeing = run_traces(*bb, head, pi.get(), images, labels, o);
  o.state_blind = true;
  const Traces blind = run_traces(*bb, head, pi.get(), images, labels, o);
  const int64_t N = 6;
  for (int64_t t = 0; t < 3; ++t) {
    EXPECT_TRUE(torch::equal(blind.states[t], glimpse_code(N, 2, 16, t))) << "glimpse " << t;
    EXPECT_TRUE(torch::allclose(blind.gazes[t], blind.gazes[t][0].expand({N, 2})))
        << "glimpse " << t;
  }
  EXPECT_FALSE(torch::allclose(blind.gazes[1][0], blind.gazes[2][0]));
  // Seeing the state, the gazes after the first glimpse depend on the image.
  EXPECT_FALSE(torch::allclose(seeing.gazes[2], seeing.gazes[2][0].expand({N, 2})));
  EXPECT_THROW(glimpse_code(1, 2, 16, 16), std::invalid_argument);
}

TEST(GazeTraces, BadInputIsRefused) {
  OneClassDataset dataset(2, false);
  model::FovealBackbone bb = small_backbone();
  model::GazePolicy pi = policy();
  const probe::TaskHead head{torch::zeros({2, 16}), torch::zeros({2})};
  std::vector<int64_t> labels;
  const auto images = cutters(dataset, 2, &labels);
  TraceOptions o;
  o.source = GazeSource::kPolicySample;
  EXPECT_THROW(run_traces(*bb, head, nullptr, images, labels, o), std::invalid_argument);
  EXPECT_THROW(run_traces(*bb, head, pi.get(), images, {0, 2}, o), std::invalid_argument);
  EXPECT_THROW(run_traces(*bb, head, pi.get(), images, {0}, o), std::invalid_argument);
  EXPECT_THROW(run_traces(*bb, probe::TaskHead{torch::zeros({2, 8}), torch::zeros({2})}, pi.get(),
                          images, labels, o),
               std::invalid_argument);
  data::PatchBatch wrong;
  wrong.resize(1, 3, 1, 4);  // a glimpse has 2 + 2 x 2 = 6 tokens
  EXPECT_THROW(images[0].cut(0.5f, 0.5f, 2.0f, wrong, 0), std::invalid_argument);
  data::PatchBatch right;
  right.resize(1, 6, 1, 4);
  EXPECT_THROW(images[0].cut(std::nanf(""), 0.5f, 2.0f, right, 0), std::invalid_argument);
  EXPECT_THROW(images[0].cut(0.5f, 0.5f, 2.0f, right, 1), std::invalid_argument);
}

// The whole stage on a task whose answer is WHERE one looks: the head is fitted to
// tell glimpses of the left half of a flat image from the right half, every image
// is of class "left", so the head's confidence rewards looking left.
TEST(PolicyTraining, LearnsToLookWhereTheHeadIsConfident) {
  model::FovealBackbone bb = small_backbone();
  OneClassDataset flat(64, /*noise=*/false);
  std::vector<int64_t> labels;
  const auto images = cutters(flat, 64, &labels);
  TraceOptions random;
  random.steps = 2;  // states[1] is the state after the first glimpse
  random.group = 8;
  random.seed = 3;
  const Traces seen = run_traces(*bb, probe::TaskHead{torch::zeros({2, 16}), torch::zeros({2})},
                                 nullptr, images, labels, random);
  probe::ProbeFeatures features;
  features.steps = seen.states[1].select(1, 0).unsqueeze(0);
  features.labels = seen.gazes[0].select(1, 0).ge(0.5f).to(torch::kInt64);  // 1 = right half
  features.vit = features.steps[0];
  const probe::LinearClassifier probe = probe::fit_linear_probe(features.steps, features.labels, 2);
  ASSERT_GT(probe::linear_accuracy(features.steps[0], features.labels, probe.weight, probe.bias),
            0.85)
      << "the state says where the glimpse was";
  const probe::TaskHead head{probe.weight, probe.bias};

  model::GazePolicy pi = policy();
  PolicyTrainOptions o;
  o.epochs = 12;
  o.batch_size = 16;
  o.group = 8;
  o.steps = 1;
  o.updates = 4;
  o.lr = 3e-3;
  o.std_start = 0.15;
  o.std_end = 0.05;
  o.seed = 4;
  const std::vector<PolicyEpoch> log = train_policy(*bb, head, *pi, flat, small_views(), o);
  ASSERT_EQ(log.size(), 12u);
  EXPECT_EQ(log[0].images, 64);
  EXPECT_GT(log.back().mean_reward, log.front().mean_reward + 0.1)
      << log.front().mean_reward << " -> " << log.back().mean_reward;
  EXPECT_GT(log.front().clip_fraction + log.back().clip_fraction, 0.0) << "updates > 1 clip";
  EXPECT_NEAR(log.back().std, 0.05, 0.01);

  GazeEvalOptions eval;
  eval.steps = 1;
  eval.batch_size = 20;  // 64 images in 4 batches
  LocalRollouts rollouts(*bb, head, flat, small_views());
  const GazeEvaluation by_chance =
      evaluate_gazes(rollouts, nullptr, GazeSource::kRandom, flat.size(), eval);
  const GazeEvaluation learned =
      evaluate_gazes(rollouts, pi.get(), GazeSource::kPolicyMode, flat.size(), eval);
  // Random gazes cover the image; the mode from the shared zero state is one point.
  EXPECT_GT(by_chance.gaze_spread[0], 0.2);
  EXPECT_LT(learned.gaze_spread[0], 1e-6);
  EXPECT_LT(by_chance.accuracy[0], 0.8);
  EXPECT_GT(learned.accuracy[0], 0.95);
  // Every image's first gaze comes from the same (initial) state, so the mean
  // entropy of the mixture's weights is that state's: H = the mixture's entropy
  // bound less the Gaussian part, log(2 pi e std^2).
  EXPECT_TRUE(by_chance.mixture_entropy.empty()) << "no policy, no mixture";
  ASSERT_EQ(learned.mixture_entropy.size(), 1u);
  {
    torch::NoGradGuard no_grad;
    const double std = 0.1;
    const double bound = pi->distribution(bb->initial_state(1), torch::ones({1, 2}), std)
                             .entropy_upper_bound()[0]
                             .item<double>();
    EXPECT_NEAR(learned.mixture_entropy[0], bound - (std::log(2 * M_PI) + 1 + 2 * std::log(std)),
                1e-4);
  }
  // Rewarded only for a right answer after the last glimpse (0 or 1, no
  // probability to climb), GRPO finds the same place.
  o.reward = rl::RewardKind::kFinalCorrect;
  model::GazePolicy by_answer = policy();
  train_policy(*bb, head, *by_answer, flat, small_views(), o);
  EXPECT_GT(evaluate_gazes(rollouts, by_answer.get(), GazeSource::kPolicyMode, flat.size(), eval)
                .accuracy[0],
            0.95);
  EXPECT_THROW(train_policy(*bb, head, *pi, flat, small_views(),
                            [] {
                              PolicyTrainOptions bad;
                              bad.group = 1;
                              return bad;
                            }()),
               std::invalid_argument);
}

// Passes batches to `inner` and keeps the weights' versions they name.
class VersionRecorder : public RolloutSource {
 public:
  explicit VersionRecorder(RolloutSource& inner) : inner_(inner) {}
  Traces run(model::GazePolicyImpl* policy, const RolloutBatch& batch) override {
    versions.push_back(batch.policy_version);
    return inner_.run(policy, batch);
  }
  std::vector<uint64_t> versions;

 private:
  RolloutSource& inner_;
};

// Rollout actors keep the weights of the last version they were sent and are
// sent new ones only when a batch names another version: a second policy
// trained through them (the fixed-path baseline) must name its own.
TEST(PolicyTraining, RolloutBatchesNameTheirWeightsFromTheVersionBase) {
  model::FovealBackbone bb = small_backbone();
  OneClassDataset flat(8, /*noise=*/false);
  LocalRollouts local(*bb, probe::TaskHead{torch::zeros({2, 16}), torch::zeros({2})}, flat,
                      small_views());
  PolicyTrainOptions o;
  o.epochs = 2;
  o.batch_size = 4;
  o.group = 2;
  o.steps = 1;
  o.updates = 1;
  for (const uint64_t base : {uint64_t{0}, uint64_t{1} << 40}) {
    o.version_base = base;
    VersionRecorder recorder(local);
    model::GazePolicy pi = policy();
    train_policy(recorder, *pi, flat.size(), o);
    EXPECT_EQ(recorder.versions, (std::vector<uint64_t>{base, base + 1, base + 2, base + 3}));
  }
}

}  // namespace
}  // namespace saccade::policy
