#include "workers/ssl/gradient_buckets.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace saccade::ssl {
namespace {

// Six 16 x 16 layers in a chain, registered after a parameter the loss never reaches and
// before a frozen one: backward hands the last layers their gradients first, the unused
// parameter none, and the frozen one takes no part.
struct Chain {
  std::vector<torch::Tensor> weights;
  torch::Tensor unused, frozen;
  NamedParameters named;
  Chain() {
    torch::manual_seed(3);
    for (int i = 0; i < 6; ++i) weights.push_back(torch::randn({16, 16}) * 0.3);
    for (auto& w : weights) w.set_requires_grad(true);
    unused = torch::randn({5}).set_requires_grad(true);
    frozen = torch::randn({16});
    named.emplace_back("unused", unused);
    for (size_t i = 0; i < weights.size(); ++i)
      named.emplace_back("layer" + std::to_string(i), weights[i]);
    named.emplace_back("frozen", frozen);
  }
  torch::Tensor loss(const torch::Tensor& x) const {
    torch::Tensor h = x;
    for (const auto& w : weights) h = torch::tanh(h.matmul(w));
    return h.pow(2).sum();
  }
};

// A world of two whose other learner's gradients are all ones: the average is (g + 1) / 2.
// The asynchronous sum adds the ones only when waited for, so reading a bucket before its
// wait would show the local gradient alone.
struct FakeWorld {
  int started = 0, started_before_backward_ended = 0;
  bool backward_done = false;
  Collectives collectives() {
    Collectives c;
    c.world_size = 2;
    c.sum = [](at::Tensor& t) { t.add_(1); };
    c.start_sum = [this](at::Tensor& t) -> AllReduceWait {
      ++started;
      if (!backward_done) ++started_before_backward_ended;
      return [t]() mutable { t.add_(1); };
    };
    return c;
  }
};

std::vector<torch::Tensor> averaged(bool overlap, FakeWorld& world, int64_t* during = nullptr) {
  Chain chain;
  const torch::Tensor x = torch::randn({4, 16}, torch::TensorOptions().dtype(torch::kFloat));
  // 16 x 16 fp32 = 1 KB per layer: buckets of at least 2 KB hold two layers each.
  GradientBuckets buckets(chain.named, chain.named, world.collectives(), overlap, 2048);
  EXPECT_EQ(buckets.buckets(), 4);  // layers 5+4, 3+2, 1+0, then the unused parameter
  buckets.arm();
  chain.loss(x).backward();
  world.backward_done = true;
  buckets.finish();
  if (during) *during = buckets.started_during_backward();
  std::vector<torch::Tensor> grads;
  for (const auto& [name, p] : chain.named)
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return grads;
}

TEST(GradientBuckets, OverlappedBucketsStartDuringBackwardAndAverageAsAfterIt) {
  FakeWorld overlapped_world, after_world;
  int64_t during = 0;
  const auto overlapped = averaged(true, overlapped_world, &during);
  const auto after = averaged(false, after_world);
  // Every bucket went out once; with overlap, those whose gradients were all in before
  // backward ended went out while it ran: all but the one holding the unused parameter.
  EXPECT_EQ(overlapped_world.started, 4);
  EXPECT_EQ(during, 3);
  EXPECT_EQ(overlapped_world.started_before_backward_ended, 3);
  ASSERT_EQ(overlapped.size(), after.size());
  for (size_t i = 0; i + 1 < overlapped.size(); ++i)
    EXPECT_TRUE(torch::equal(overlapped[i], after[i])) << "parameter " << i;
  // The unused parameter counts as zeros: (0 + 1) / 2; the frozen one gets no gradient.
  EXPECT_TRUE(torch::equal(overlapped.front(), torch::full({5}, 0.5f)));
  EXPECT_FALSE(overlapped.back().defined());
  EXPECT_FALSE(after.back().defined());
}

TEST(GradientBuckets, TheAverageIsTheLocalGradientWithTheOtherLearners) {
  // Local gradients of the chain alone.
  Chain chain;
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({4, 16});
  chain.loss(x).backward();
  std::vector<torch::Tensor> local;
  for (const auto& w : chain.weights) local.push_back(w.grad().clone());

  // The same chain (same seed, same input) through overlapped buckets.
  Chain again;
  FakeWorld world;
  GradientBuckets buckets(again.named, again.named, world.collectives(), true, 2048);
  buckets.arm();
  again.loss(x).backward();
  buckets.finish();
  for (size_t i = 0; i < again.weights.size(); ++i)
    EXPECT_TRUE(torch::allclose(again.weights[i].grad(), (local[i] + 1) / 2, 0, 0)) << i;
}

TEST(GradientBuckets, CopiesComputeOnOtherTensorsAndGiveTheMastersTheAverage) {
  Chain compute;
  NamedParameters masters;
  for (const auto& [name, p] : compute.named)
    masters.emplace_back(name, p.detach().clone().set_requires_grad(true));
  FakeWorld world;
  GradientBuckets buckets(compute.named, masters, world.collectives(), true, 2048);
  buckets.arm();
  torch::manual_seed(5);
  compute.loss(torch::randn({4, 16})).backward();
  std::vector<torch::Tensor> local;
  for (const auto& w : compute.weights) local.push_back(w.grad().clone());
  buckets.finish();
  for (size_t i = 0; i < compute.weights.size(); ++i) {
    EXPECT_FALSE(compute.weights[i].grad().defined()) << "the copy kept its gradient " << i;
    // masters[0] is the unused parameter; layer i is masters[i + 1].
    EXPECT_TRUE(torch::allclose(masters[i + 1].second.grad(), (local[i] + 1) / 2, 0, 0)) << i;
  }
}

TEST(GradientBuckets, HooksOutsideAnArmedPassTakeNothing) {
  Chain chain;
  FakeWorld world;
  {
    GradientBuckets buckets(chain.named, chain.named, world.collectives(), true, 2048);
    chain.loss(torch::randn({4, 16})).backward();  // not armed: a plain backward
    EXPECT_EQ(world.started, 0);
  }
  // Gone with the buckets: a later backward runs without them.
  chain.loss(torch::randn({4, 16})).backward();
  EXPECT_EQ(world.started, 0);
}

}  // namespace
}  // namespace saccade::ssl
