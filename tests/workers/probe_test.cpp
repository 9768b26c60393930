// The probe stage's pieces: features of the frozen backbone and the linear head.
#include "workers/probe/probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <opencv2/core.hpp>

#include "model/backbone.h"
#include "tests/workers/small_models.h"

namespace saccade::workers {
namespace {

using saccade::testing::small_backbone;
using saccade::testing::small_views;

// Features of three classes around distinct means: the last glimpse sees them
// clearly, the first through noise.
ProbeFeatures clustered(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor means = torch::eye(3, 6) * 3;
  ProbeFeatures f;
  f.labels = torch::arange(n) % 3;
  const torch::Tensor centre = means.index_select(0, f.labels);
  f.vit = centre + 0.3 * torch::randn({n, 6});
  f.steps =
      torch::stack({centre + 3.0 * torch::randn({n, 6}), centre + 0.3 * torch::randn({n, 6})});
  return f;
}

TEST(LinearProbe, LearnsSeparableFeaturesAndKeepsTheBestRate) {
  const ProbeFeatures train = clustered(300, 1), val = clustered(150, 2);
  LinearProbeOptions o;
  o.epochs = 10;
  o.batch_size = 32;
  o.lrs = {1e-7, 0.1};
  const ProbeResult r = train_linear_probe(train, val, 3, o);
  EXPECT_EQ(r.lr, 0.1);
  ASSERT_EQ(r.sweep.size(), 2u);
  EXPECT_LT(r.sweep[0].second, 0.8) << "a rate of 1e-7 barely moves the head from its init";
  EXPECT_GT(r.sweep[1].second, 0.97);
  EXPECT_EQ(r.sweep[1].second, r.step_accuracy.back());
  EXPECT_GT(r.vit_accuracy, 0.97);
  ASSERT_EQ(r.step_accuracy.size(), 2u);
  EXPECT_LT(r.step_accuracy[0], r.step_accuracy[1]) << "the noisy first glimpse is harder";
  EXPECT_EQ(r.weight.sizes(), (std::vector<int64_t>{3, 6}));
  EXPECT_DOUBLE_EQ(probe_accuracy(val.vit, val.labels, r.weight, r.bias), r.vit_accuracy);
  // The same seed trains the same head.
  EXPECT_TRUE(torch::equal(train_linear_probe(train, val, 3, o).weight, r.weight));
}

TEST(LinearProbe, BadInputIsRefused) {
  const ProbeFeatures f = clustered(30, 3);
  LinearProbeOptions o;
  o.epochs = 1;
  EXPECT_THROW(train_linear_probe(f, f, 1, o), std::invalid_argument);  // one class
  EXPECT_THROW(train_linear_probe(f, f, 2, o), std::invalid_argument);  // label 2 of 2 classes
  o.lrs.clear();
  EXPECT_THROW(train_linear_probe(f, f, 3, o), std::invalid_argument);
  ProbeFeatures other = f;
  other.steps = torch::zeros({2, 30, 5});  // another width
  EXPECT_THROW(train_linear_probe(f, other, 3, LinearProbeOptions{}), std::invalid_argument);
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
}

}  // namespace
}  // namespace saccade::workers
