// The probe stage's pieces: features of the frozen backbone, k-NN and the linear probe.
#include "workers/probe/probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <opencv2/core.hpp>

#include "model/backbone.h"
#include "model/heads.h"
#include "tests/workers/small_models.h"
#include "workers/probe/task_head.h"
#include "workers/probe/transformer_probe.h"

namespace saccade::probe {
namespace {

using saccade::testing::small_backbone;
using saccade::testing::small_views;

// Features of `classes` classes around distinct means, with `noise` around them.
torch::Tensor clustered(const torch::Tensor& labels, int64_t classes, double noise,
                        int64_t dim = 16) {
  const torch::Tensor means = torch::eye(classes, dim) * 3;
  return means.index_select(0, labels) + noise * torch::randn({labels.size(0), dim});
}

// Three classes: the ViT mode and the last glimpse see them clearly, the first glimpse
// through noise.
ProbeFeatures three_classes(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  ProbeFeatures f;
  f.labels = torch::arange(n) % 3;
  f.vit = clustered(f.labels, 3, 0.3, 6);
  f.steps = torch::stack({clustered(f.labels, 3, 3.0, 6), clustered(f.labels, 3, 0.3, 6)});
  return f;
}

TEST(Knn, IsDinosWeightedVoteWorkedByHand) {
  // Bank: two class-0 rows near the query, three class-1 rows a little further.
  const torch::Tensor bank =
      torch::tensor({{1.0f, 0.1f}, {1.0f, 0.2f}, {1.0f, 0.5f}, {1.0f, 0.6f}, {1.0f, 0.7f}});
  const torch::Tensor bank_labels = torch::tensor({0, 0, 1, 1, 1}, torch::kInt64);
  const torch::Tensor query = torch::tensor({{1.0f, 0.0f}});
  // k = 5, T large: the votes are nearly equal, the majority (class 1) wins.
  KnnOptions flat{5, 100.0};
  EXPECT_EQ(knn_accuracy(bank, bank_labels, query, torch::tensor({1}, torch::kInt64), 2, flat), 1);
  // T small: the nearest neighbours' exp(cos / T) outweighs the majority.
  KnnOptions sharp{5, 0.05};
  EXPECT_EQ(knn_accuracy(bank, bank_labels, query, torch::tensor({0}, torch::kInt64), 2, sharp), 1);
  // k = 2: only the two class-0 rows vote. Scale does not matter (cosine).
  KnnOptions two{2, 100.0};
  EXPECT_EQ(
      knn_accuracy(bank * 7, bank_labels, query * 0.01, torch::tensor({0}, torch::kInt64), 2, two),
      1);
}

TEST(Knn, SeparableFeaturesScoreHighAndShuffledLabelsScoreChance) {
  torch::manual_seed(1);
  const torch::Tensor train_y = torch::arange(2000) % 10, val_y = torch::arange(1000) % 10;
  const torch::Tensor train = clustered(train_y, 10, 0.5), val = clustered(val_y, 10, 0.5);
  KnnOptions o;
  o.chunk = 300;  // several chunks
  EXPECT_GE(knn_accuracy(train, train_y, val, val_y, 10, o), 0.95);
  const torch::Tensor shuffled = train_y.index_select(0, torch::randperm(2000));
  const double chance = knn_accuracy(train, shuffled, val, val_y, 10, o);
  EXPECT_LT(chance, 0.16) << "10 classes: chance is 0.10";
  EXPECT_THROW(knn_accuracy(train, train_y, val, val_y, 5, o), std::invalid_argument);  // labels
  EXPECT_THROW(knn_accuracy(train, train_y, val.narrow(1, 0, 3), val_y, 10, o),
               std::invalid_argument);
}

TEST(LinearProbe, SeparableFeaturesScoreHighAndShuffledLabelsScoreChance) {
  torch::manual_seed(2);
  const torch::Tensor train_y = torch::arange(2000) % 10, val_y = torch::arange(1000) % 10;
  const torch::Tensor train = clustered(train_y, 10, 0.5), val = clustered(val_y, 10, 0.5);
  const LinearClassifier fitted = fit_linear_probe(train.unsqueeze(0), train_y, 10);
  EXPECT_GE(linear_accuracy(val, val_y, fitted.weight, fitted.bias), 0.95);
  const torch::Tensor shuffled = train_y.index_select(0, torch::randperm(2000));
  const LinearClassifier noise = fit_linear_probe(train.unsqueeze(0), shuffled, 10);
  EXPECT_LT(linear_accuracy(val, val_y, noise.weight, noise.bias), 0.16) << "chance is 0.10";
  // The C kept is the best of the sweep on the held-apart images, each C tried once.
  ASSERT_EQ(fitted.sweep.size(), 4u);
  double best = 0;
  for (const auto& [c, accuracy] : fitted.sweep) best = std::max(best, accuracy);
  for (const auto& [c, accuracy] : fitted.sweep) {
    if (c == fitted.c) {
      EXPECT_EQ(accuracy, best);
    }
  }
  EXPECT_LT(fitted.evaluations, 1250) << "L-BFGS stopped at its cap, not at convergence";
}

// Overlapping classes, so that the weakly regularised fits take hundreds of L-BFGS
// evaluations from zeros. Warm starts (each C from the previous one's optimum, the refit
// from the kept C's) must reach the same heads for fewer evaluations, whatever order the
// Cs are given in.
TEST(LinearProbe, WarmStartsReachTheColdOptimaInFewerEvaluations) {
  torch::manual_seed(5);
  const torch::Tensor train_y = torch::arange(3000) % 10, val_y = torch::arange(1000) % 10;
  const torch::Tensor train = clustered(train_y, 10, 2.0, 32), val = clustered(val_y, 10, 2.0, 32);
  LinearProbeOptions o;
  o.cs = {10.0, 1.0, 0.1, 0.01};
  const LinearClassifier warm = fit_linear_probe(train.unsqueeze(0), train_y, 10, o);
  o.warm_start = false;
  const LinearClassifier cold = fit_linear_probe(train.unsqueeze(0), train_y, 10, o);

  ASSERT_EQ(warm.sweep.size(), 4u);
  for (size_t i = 0; i < warm.sweep.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(warm.sweep[i - 1].first, warm.sweep[i].first) << "C ascending";
    }
    EXPECT_EQ(warm.sweep[i].first, cold.sweep[i].first);
    EXPECT_NEAR(warm.sweep[i].second, cold.sweep[i].second, 0.01) << "C " << warm.sweep[i].first;
  }
  EXPECT_EQ(warm.c, cold.c);
  auto predicted = [&](const LinearClassifier& h) {
    return torch::addmm(h.bias, val, h.weight.t()).argmax(1);
  };
  EXPECT_GE(predicted(warm).eq(predicted(cold)).to(torch::kFloat64).mean().item<double>(), 0.99);
  EXPECT_NEAR(linear_accuracy(val, val_y, warm.weight, warm.bias),
              linear_accuracy(val, val_y, cold.weight, cold.bias), 0.01);
  EXPECT_LT(warm.total_evaluations, cold.total_evaluations);
  EXPECT_LT(warm.evaluations, cold.evaluations) << "the refit starts from the kept C's head";
  std::printf("L-BFGS evaluations, sweep + refit: warm %lld, cold %lld\n",
              static_cast<long long>(warm.total_evaluations),
              static_cast<long long>(cold.total_evaluations));
}

// Standardisation: the class lives in one dimension 1e-4 as wide as the
// others, which carry noise. Fitted on raw features under L2, that dimension
// would cost 1e8 times more weight than the noise; standardised, it wins. The
// head comes back folded: it works on the raw features.
TEST(LinearProbe, StandardisesFeaturesAndFoldsTheScalingIntoTheHead) {
  torch::manual_seed(3);
  auto features = [](const torch::Tensor& y) {
    torch::Tensor x = torch::randn({y.size(0), 8});
    x.select(1, 0).copy_((y.to(torch::kFloat32) * 2 - 1 + 0.3 * torch::randn({y.size(0)})) * 1e-4 +
                         5.0);  // offset too: the mean must come out as well
    return x;
  };
  const torch::Tensor train_y = torch::arange(600) % 2, val_y = torch::arange(400) % 2;
  const torch::Tensor train = features(train_y), val = features(val_y);
  LinearProbeOptions o;
  o.cs = {0.01};  // strong L2: without standardisation this is chance
  const LinearClassifier fitted = fit_linear_probe(train.unsqueeze(0), train_y, 2, o);
  EXPECT_GT(linear_accuracy(val, val_y, fitted.weight, fitted.bias), 0.95);
}

TEST(LinearProbe, HoldsImagesNotRowsApartAndRefusesBadInput) {
  // Two views per image; the same seed gives the same head.
  const ProbeFeatures f = three_classes(90, 4);
  const LinearClassifier a = fit_linear_probe(f.steps, f.labels, 3);
  const LinearClassifier b = fit_linear_probe(f.steps, f.labels, 3);
  EXPECT_TRUE(torch::equal(a.weight, b.weight));
  EXPECT_EQ(a.weight.sizes(), (std::vector<int64_t>{3, 6}));
  EXPECT_THROW(fit_linear_probe(f.steps, f.labels, 2), std::invalid_argument);  // label 2 of 2
  EXPECT_THROW(fit_linear_probe(f.steps, f.labels, 1), std::invalid_argument);  // one class
  EXPECT_THROW(fit_linear_probe(f.steps, f.labels.narrow(0, 0, 10), 3), std::invalid_argument);
  LinearProbeOptions o;
  o.cs.clear();
  EXPECT_THROW(fit_linear_probe(f.steps, f.labels, 3, o), std::invalid_argument);
  o.cs = {-1.0};
  EXPECT_THROW(fit_linear_probe(f.steps, f.labels, 3, o), std::invalid_argument);
}

TEST(EvaluateBackbone, ScoresViTModeAndEveryGlimpseWithOneTaskHead) {
  const ProbeFeatures train = three_classes(300, 5), val = three_classes(150, 6);
  const BackboneEvaluation e = evaluate_backbone(train, val, 3, EvaluationOptions{});
  EXPECT_GT(e.vit.knn, 0.97);
  EXPECT_GT(e.vit.linear, 0.97);
  ASSERT_EQ(e.steps.size(), 2u);
  EXPECT_LT(e.steps[0].linear, e.steps[1].linear) << "the noisy first glimpse is harder";
  EXPECT_LT(e.steps[0].knn, e.steps[1].knn);
  EXPECT_GT(e.steps[1].linear, 0.97);
  // The task head is one head for every glimpse: its accuracy is what the report says.
  EXPECT_DOUBLE_EQ(linear_accuracy(val.steps[1], val.labels, e.task_head.weight, e.task_head.bias),
                   e.steps[1].linear);
  EXPECT_DOUBLE_EQ(linear_accuracy(val.vit, val.labels, e.vit_head.weight, e.vit_head.bias),
                   e.vit.linear);
  ProbeFeatures other = val;
  other.steps = torch::zeros({2, 150, 5});  // another width
  EXPECT_THROW(evaluate_backbone(train, other, 3, EvaluationOptions{}), std::invalid_argument);
}

// A row that differs from NAME only in its glimpse features (glimpse_mean) takes NAME's ViT
// mode as it is, head included, and fits its own glimpse head.
TEST(EvaluateBackbone, CopiesViTModeFromAnEvaluationOfTheSameFeatures) {
  const ProbeFeatures train = three_classes(300, 5), val = three_classes(150, 6);
  BackboneEvaluation first = evaluate_backbone(train, val, 3, EvaluationOptions{});
  first.vit.linear = -1.0;  // marked: a refit could not give this
  first.vit.knn = -2.0;
  ProbeFeatures t = train, v = val;
  t.steps = train.steps.flip({0});  // other glimpse features, same ViT mode
  v.steps = val.steps.flip({0});
  const BackboneEvaluation e = evaluate_backbone(t, v, 3, EvaluationOptions{}, &first);
  EXPECT_EQ(e.vit.linear, -1.0);
  EXPECT_EQ(e.vit.knn, -2.0);
  EXPECT_TRUE(torch::equal(e.vit_head.weight, first.vit_head.weight));
  ASSERT_EQ(e.steps.size(), 2u);
  EXPECT_LT(e.steps[1].linear, e.steps[0].linear) << "the glimpses were swapped";
  EXPECT_DOUBLE_EQ(e.steps[0].linear,
                   evaluate_backbone(t, v, 3, EvaluationOptions{}).steps[0].linear);
}

TEST(MeanOverGlimpses, KeepsWhatAnEarlierGlimpseSawWhereTheLastStateForgotIt) {
  const torch::Tensor steps = torch::tensor({1.f, 2.f, 3.f, 5.f, 7.f, 9.f}).reshape({3, 1, 2});
  const torch::Tensor mean = mean_over_glimpses(steps);
  ASSERT_EQ(mean.sizes(), steps.sizes());
  EXPECT_TRUE(
      torch::allclose(mean.reshape({-1}), torch::tensor({1.f, 2.f, 2.f, 3.5f, 11.f / 3, 16.f / 3})))
      << mean;
  // A forgetting sequence: the class is in glimpse 1's state only, later states are noise.
  ProbeFeatures train = three_classes(300, 5), val = three_classes(150, 6);
  for (ProbeFeatures* f : {&train, &val}) {
    const int64_t n = f->labels.size(0);
    f->steps = torch::cat({f->vit.unsqueeze(0), torch::randn({3, n, f->vit.size(1)})});
  }
  const BackboneEvaluation last = evaluate_backbone(train, val, 3, EvaluationOptions{});
  EXPECT_LT(last.steps[3].linear, 0.5) << "the last state alone has forgotten the class";
  train.steps = mean_over_glimpses(train.steps);
  val.steps = mean_over_glimpses(val.steps);
  const BackboneEvaluation mean_of = evaluate_backbone(train, val, 3, EvaluationOptions{});
  EXPECT_GT(mean_of.steps[3].linear, 0.7) << "the mean still holds glimpse 1's class";
  EXPECT_THROW(mean_over_glimpses(torch::zeros({2, 3})), std::invalid_argument);
}

// [V, N, S, D] state tokens whose class (of 3) is written only in token 2:
// the first state token is noise.
torch::Tensor class_in_third_token(const torch::Tensor& labels, int64_t views) {
  const int64_t n = labels.size(0);
  torch::Tensor x = torch::randn({views, n, 3, 6});
  x.select(2, 2).add_(torch::eye(3, 6).index_select(0, labels).unsqueeze(0) * 4);
  return x * 4 + 2;  // off-centre and wide: the head standardises its inputs
}

TEST(TransformerProbe, ReadsEveryStateTokenWhereTheLinearProbeSeesOnlyTheFirst) {
  torch::manual_seed(11);
  const torch::Tensor train_y = torch::arange(600) % 3, val_y = torch::arange(300) % 3;
  const torch::Tensor train = class_in_third_token(train_y, 2);
  const torch::Tensor val = class_in_third_token(val_y, 1)[0];
  TransformerProbeOptions o;
  o.lrs = {3e-3, 1e-4};
  o.steps = 400;
  o.checks = 5;
  o.batch_size = 64;
  o.heads = 2;
  o.seed = 3;
  const TransformerClassifier fit = fit_transformer_probe(train, train_y, 3, o);
  ASSERT_TRUE(fit.head.transformer);
  EXPECT_STREQ(fit.head.kind(), "transformer");
  EXPECT_EQ(fit.head.classes(), 3);
  EXPECT_GT(head_accuracy(fit.head, val, val_y), 0.9);
  // The linear probe reads the first token: chance.
  const LinearClassifier linear = fit_linear_probe(train.select(2, 0), train_y, 3);
  EXPECT_LT(linear_accuracy(val.select(1, 0), val_y, linear.weight, linear.bias), 0.5);
  // Both learning rates were tried with 5 checks each; the kept one is the best on held-apart
  // images, and its step is one of the checks.
  ASSERT_EQ(fit.sweep.size(), 2u);
  double best = 0;
  for (const auto& trial : fit.sweep) {
    ASSERT_EQ(trial.held_accuracy.size(), 5u);
    for (const auto& [step, accuracy] : trial.held_accuracy) {
      if (accuracy > best) best = accuracy;
      if (trial.lr == fit.lr && step == fit.steps) {
        EXPECT_EQ(accuracy, best);
      }
    }
  }
  EXPECT_EQ(fit.lr, 3e-3) << "1e-4 for 400 steps cannot fit";
  // Shuffled labels carry nothing: the head does not score above chance on new images.
  const TransformerClassifier shuffled =
      fit_transformer_probe(train, train_y.index_select(0, torch::randperm(600)), 3, o);
  EXPECT_LT(head_accuracy(shuffled.head, val, val_y), 0.45);
  o.lrs = {};
  EXPECT_THROW(fit_transformer_probe(train, train_y, 3, o), std::invalid_argument);
  EXPECT_THROW(fit_transformer_probe(train[0], train_y, 3), std::invalid_argument);
}

TEST(ProbeHeadsFile, BothKindsRoundTripAndBadBytesAreRefusedByName) {
  torch::manual_seed(12);
  ProbeHeads linear{{torch::randn({3, 6}), torch::randn({3})}, {}, 40, "", 0};
  ProbeHeads parsed = parse_probe_heads(serialize_probe_heads(linear, {{"c", "0.1"}}), "lin");
  EXPECT_EQ(parsed.checkpoint_step, 40);
  EXPECT_STREQ(parsed.task.kind(), "linear");
  EXPECT_TRUE(torch::equal(parsed.task.weight, linear.task.weight));
  EXPECT_FALSE(parsed.vit.defined()) << "no ViT-mode head was written";
  EXPECT_TRUE(parsed.backbone_file.empty()) << "a checkpoint's head names no backbone file";

  auto task = saccade::testing::small_transformer_head(6, 3, 3);
  auto vit = saccade::testing::small_transformer_head(6, 3, 3);
  task->set_input_statistics(torch::randn({3, 6}), torch::rand({3, 6}) + 0.5);
  const ProbeHeads transformer{TaskHead(task), TaskHead(vit), -1, "/runs/a/backbone.safetensors",
                               4000000000u};
  parsed = parse_probe_heads(serialize_probe_heads(transformer), "tf");
  EXPECT_EQ(parsed.checkpoint_step, -1);
  EXPECT_EQ(parsed.backbone_file, "/runs/a/backbone.safetensors");
  EXPECT_EQ(parsed.backbone_crc32, 4000000000u) << "a CRC-32 above 2^31 survives";
  ASSERT_TRUE(parsed.task.transformer && parsed.vit.transformer);
  const torch::Tensor states = torch::randn({5, 3, 6});
  EXPECT_TRUE(torch::allclose(parsed.task.logits(states), transformer.task.logits(states)));
  EXPECT_TRUE(torch::allclose(parsed.vit.logits(states), transformer.vit.logits(states)));
  EXPECT_FALSE(torch::allclose(parsed.task.logits(states), parsed.vit.logits(states)));
  EXPECT_NO_THROW(parsed.task.check_fits(3, 6, "tf"));
  EXPECT_THROW(parsed.task.check_fits(4, 6, "tf"), std::invalid_argument) << "other n_state";

  try {
    parse_probe_heads("not a file", "probe_head.safetensors from X");
    FAIL() << "garbage was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("probe_head.safetensors from X"), std::string::npos);
  }
}

// Random grey images of various sizes, labelled i % 2.
class NoiseDataset : public data::Dataset {
 public:
  int64_t size() const override { return 10; }
  int64_t num_classes() const override { return 2; }
  int channels() const override { return 1; }
  std::optional<data::Sample> get(int64_t i) const override {
    cv::Mat m(20 + static_cast<int>(i) * 3, 30, CV_8UC1);
    cv::RNG(static_cast<uint64_t>(i) + 1).fill(m, cv::RNG::UNIFORM, 0, 256);
    return data::Sample{m, i % 2, "noise"};
  }
  const data::DatasetStats& stats() const override { return stats_; }

 private:
  data::DatasetStats stats_;
};

TEST(ProbeFeatures, AreTheBackbonesStatesWhateverTheBatching) {
  NoiseDataset dataset;
  model::FovealBackbone backbone = small_backbone();
  const data::ViewOptions views = small_views();
  FeatureOptions o;
  o.glimpses = 3;
  o.batch_size = 4;  // 10 images: batches of 4, 4, 2
  o.seed = 5;
  const ProbeFeatures f = extract_probe_features(*backbone, dataset, views, o);
  ASSERT_EQ(f.steps.sizes(), (std::vector<int64_t>{3, 10, 16}));
  ASSERT_EQ(f.vit.sizes(), (std::vector<int64_t>{10, 16}));
  EXPECT_EQ(f.labels[7].item<int64_t>(), 1);
  EXPECT_TRUE(backbone->is_training()) << "the backbone's mode is restored";
  o.batch_size = 3;
  o.threads = 2;
  const ProbeFeatures g = extract_probe_features(*backbone, dataset, views, o);
  EXPECT_TRUE(torch::allclose(f.steps, g.steps, 1e-5, 1e-6))
      << "gazes follow the image, not the batch";
  EXPECT_TRUE(torch::allclose(f.vit, g.vit, 1e-5, 1e-6));
  // State is carried: glimpse 2 alone from the zero state is not what the sequence gives.
  o.glimpses = 1;
  const ProbeFeatures one = extract_probe_features(*backbone, dataset, views, o);
  EXPECT_TRUE(torch::allclose(one.steps[0], f.steps[0], 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(f.steps[1], f.steps[0], 1e-3, 1e-3));
  o.seed = 6;  // other gazes, other states; the ViT grid has no randomness
  const ProbeFeatures other = extract_probe_features(*backbone, dataset, views, o);
  EXPECT_FALSE(torch::allclose(other.steps[0], f.steps[0], 1e-3, 1e-3));
  EXPECT_TRUE(torch::allclose(other.vit, f.vit, 1e-5, 1e-6));
  // The raw-pixel baseline is the ViT-mode grid's patches, only when asked for.
  EXPECT_FALSE(other.pixels.defined());
  o.pixels = true;
  o.all_states = true;
  const ProbeFeatures with_pixels = extract_probe_features(*backbone, dataset, views, o);
  ASSERT_EQ(with_pixels.pixels.sizes(), (std::vector<int64_t>{10, 9 * 16}));
  // Every state token, concatenated: the first D columns are the first token.
  ASSERT_EQ(with_pixels.vit_all_states.sizes(), (std::vector<int64_t>{10, 2 * 16}));
  // o.glimpses is 1 here.
  ASSERT_EQ(with_pixels.steps_all_states.sizes(), (std::vector<int64_t>{1, 10, 2 * 16}));
  EXPECT_TRUE(torch::allclose(with_pixels.vit_all_states.narrow(1, 0, 16), with_pixels.vit));
  EXPECT_TRUE(
      torch::allclose(with_pixels.steps_all_states[0].narrow(1, 0, 16), with_pixels.steps[0]));
  EXPECT_FALSE(torch::allclose(with_pixels.vit_all_states.narrow(1, 16, 16), with_pixels.vit));
  // The ViT-mode feature is one step over the image's full grid.
  data::EvalBatch batch;
  batch.allocate(views, 1, 1);
  const data::Sample s = *dataset.get(4);
  data::make_eval_views(views, s.image, 0, 0, batch);
  torch::NoGradGuard no_grad;
  backbone->eval();
  const torch::Tensor direct =
      backbone
          ->step(torch::from_blob(batch.vit.patches.data(), {1, 9, 1, 4, 4}),
                 torch::from_blob(batch.vit.positions.data(), {1, 9, 3}))
          .state.select(1, 0);
  EXPECT_TRUE(torch::allclose(direct[0], f.vit[4], 1e-5, 1e-6));
  // The mean patch token: ViT mode's over its grid; after glimpse k over glimpses 1..k.
  EXPECT_FALSE(with_pixels.vit_patch_mean.defined()) << "only when asked for";
  o.patch_mean = true;
  o.glimpses = 2;
  const ProbeFeatures with_means = extract_probe_features(*backbone, dataset, views, o);
  ASSERT_EQ(with_means.vit_patch_mean.sizes(), (std::vector<int64_t>{10, 16}));
  ASSERT_EQ(with_means.steps_patch_mean.sizes(), (std::vector<int64_t>{2, 10, 16}));
  const torch::Tensor direct_mean =
      backbone
          ->step(torch::from_blob(batch.vit.patches.data(), {1, 9, 1, 4, 4}),
                 torch::from_blob(batch.vit.positions.data(), {1, 9, 3}))
          .patch_tokens.mean(1);
  EXPECT_TRUE(torch::allclose(direct_mean[0], with_means.vit_patch_mean[4], 1e-5, 1e-6));
  o.glimpses = 1;
  const ProbeFeatures one_mean = extract_probe_features(*backbone, dataset, views, o);
  EXPECT_TRUE(
      torch::allclose(one_mean.steps_patch_mean[0], with_means.steps_patch_mean[0], 1e-5, 1e-6))
      << "glimpse 1's mean does not depend on later glimpses";
  EXPECT_FALSE(
      torch::allclose(with_means.steps_patch_mean[1], with_means.steps_patch_mean[0], 1e-3, 1e-3))
      << "glimpse 2's patches enter the mean";
  EXPECT_FALSE(torch::allclose(with_means.steps_patch_mean[0], with_means.steps[0], 1e-3, 1e-3));
  EXPECT_TRUE(
      torch::equal(with_pixels.pixels[4], torch::from_blob(batch.vit.patches.data(), {9 * 16})));
}

}  // namespace
}  // namespace saccade::probe
