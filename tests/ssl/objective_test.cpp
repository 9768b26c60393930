#include "workers/ssl/objective.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

namespace saccade::ssl {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

Matrix to_matrix(const at::Tensor& t) {
  const at::Tensor c = t.to(torch::kDouble).contiguous();
  Matrix m(c.size(0), std::vector<double>(c.size(1)));
  for (int64_t i = 0; i < c.size(0); ++i)
    for (int64_t j = 0; j < c.size(1); ++j) m[i][j] = c[i][j].item<double>();
  return m;
}

// DINOv2's sinkhorn_knopp_teacher written out in doubles, independently.
Matrix reference_sinkhorn(const Matrix& logits, double temp, int iterations) {
  const size_t b = logits.size(), k = logits[0].size();
  Matrix q(k, std::vector<double>(b));  // [K][B]
  double total = 0;
  for (size_t i = 0; i < b; ++i)
    for (size_t j = 0; j < k; ++j) total += q[j][i] = std::exp(logits[i][j] / temp);
  for (auto& row : q)
    for (double& v : row) v /= total;
  for (int it = 0; it < iterations; ++it) {
    for (auto& row : q) {
      double s = 0;
      for (double v : row) s += v;
      for (double& v : row) v = v / s / static_cast<double>(k);
    }
    for (size_t i = 0; i < b; ++i) {
      double s = 0;
      for (size_t j = 0; j < k; ++j) s += q[j][i];
      for (size_t j = 0; j < k; ++j) q[j][i] = q[j][i] / s / static_cast<double>(b);
    }
  }
  Matrix out(b, std::vector<double>(k));
  for (size_t i = 0; i < b; ++i)
    for (size_t j = 0; j < k; ++j) out[i][j] = q[j][i] * static_cast<double>(b);
  return out;
}

TEST(Sinkhorn, MatchesDinoV2AndHasTheRightMarginals) {
  torch::manual_seed(1);
  const at::Tensor logits = torch::randn({16, 8}) * 0.3;
  const at::Tensor q = sinkhorn_knopp(logits, 0.07);
  ASSERT_EQ(q.sizes(), logits.sizes());
  const Matrix expected = reference_sinkhorn(to_matrix(logits), 0.07, 3);
  const Matrix got = to_matrix(q);
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = 0; j < got[i].size(); ++j) EXPECT_NEAR(got[i][j], expected[i][j], 1e-5);
  // Each sample's row sums to 1 (the last normalisation is over samples).
  EXPECT_TRUE(torch::allclose(q.sum(1), torch::ones({16}), 1e-5, 1e-5));
  // With enough iterations every prototype gets B / K samples' worth of mass.
  SinkhornOptions converge;
  converge.iterations = 200;
  const at::Tensor qc = sinkhorn_knopp(logits, 0.07, converge);
  EXPECT_TRUE(torch::allclose(qc.sum(0), torch::full({8}, 16.0 / 8), 1e-4, 1e-4)) << qc.sum(0);
  EXPECT_TRUE(torch::allclose(qc.sum(1), torch::ones({16}), 1e-5, 1e-5));
  // ...and 3 iterations already pull the columns much closer than a softmax.
  const at::Tensor softmax_cols = torch::softmax(logits / 0.07, 1).sum(0);
  EXPECT_LT((q.sum(0) - 2.0).abs().max().item<double>(),
            (softmax_cols - 2.0).abs().max().item<double>());
}

TEST(Sinkhorn, SubtractMaxIsExactAndAvoidsOverflow) {
  torch::manual_seed(2);
  const at::Tensor logits = torch::randn({12, 6}) * 0.5;
  SinkhornOptions stable;
  stable.subtract_max = true;
  EXPECT_TRUE(torch::allclose(sinkhorn_knopp(logits, 0.05, stable), sinkhorn_knopp(logits, 0.05),
                              1e-5, 1e-6));
  // Offsets per prototype (as a biased head gives) push exp past fp32's range.
  const at::Tensor huge = logits + torch::arange(6).to(torch::kFloat) * 3 + 10;
  EXPECT_FALSE(torch::isfinite(sinkhorn_knopp(huge, 0.05)).all().item<bool>());
  const at::Tensor q = sinkhorn_knopp(huge, 0.05, stable);
  EXPECT_TRUE(torch::isfinite(q).all().item<bool>());
  EXPECT_TRUE(torch::allclose(q.sum(1), torch::ones({12}), 1e-4, 1e-4));
}

// Two ranks as two threads; each all-reduce meets at a barrier.
class FakeGroup {
 public:
  void reduce(int rank, at::Tensor& t, bool max) {
    slot_[rank] = t.clone();
    sync_.arrive_and_wait();
    const at::Tensor r = max ? torch::maximum(slot_[0], slot_[1]) : slot_[0] + slot_[1];
    sync_.arrive_and_wait();  // both have read before anyone writes a slot again
    t.copy_(r);
  }

 private:
  std::barrier<> sync_{2};
  std::array<at::Tensor, 2> slot_;
};

void expect_two_ranks_match_one(bool subtract_max) {
  torch::manual_seed(3);
  const at::Tensor logits = torch::randn({10, 7});
  SinkhornOptions single;
  single.subtract_max = subtract_max;
  const at::Tensor whole = sinkhorn_knopp(logits, 0.1, single);

  FakeGroup group;
  std::array<at::Tensor, 2> parts;
  std::vector<std::thread> ranks;
  const std::array<at::Tensor, 2> shards = {logits.slice(0, 0, 4), logits.slice(0, 4, 10)};
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      SinkhornOptions o;
      o.subtract_max = subtract_max;
      o.all_reduce_sum = [&, rank](at::Tensor& t) { group.reduce(rank, t, false); };
      o.all_reduce_max = [&, rank](at::Tensor& t) { group.reduce(rank, t, true); };
      parts[rank] = sinkhorn_knopp(shards[rank], 0.1, o);
    });
  }
  for (std::thread& t : ranks) t.join();
  const at::Tensor joined = torch::cat({parts[0], parts[1]}, 0);
  EXPECT_TRUE(torch::allclose(joined, whole, 1e-5, 1e-6)) << (joined - whole).abs().max();
  // A rank alone (no all-reduce) would centre differently: the hook matters.
  EXPECT_FALSE(torch::allclose(sinkhorn_knopp(shards[0], 0.1), whole.slice(0, 0, 4), 1e-3, 1e-4));
}

TEST(Sinkhorn, TwoRanksWithAllReduceEqualOneProcess) {
  expect_two_ranks_match_one(false);
}
TEST(Sinkhorn, TwoRanksWithSubtractMaxEqualOneProcess) {
  expect_two_ranks_match_one(true);
}

// DINO's DINOLoss: softmax((t - center) / temp); update_center: EMA of the batch mean.
TEST(EmaCentring, SoftmaxOfCentredLogitsAndTheCentresEma) {
  torch::manual_seed(5);
  const at::Tensor logits = torch::randn({6, 5});
  const at::Tensor center = torch::randn({1, 5});
  const at::Tensor targets = centred_softmax(logits, center, 0.04);
  const at::Tensor expected = torch::exp((logits - center) / 0.04);
  EXPECT_TRUE(torch::allclose(targets, expected / expected.sum(1, true), 1e-5, 1e-7));
  EXPECT_TRUE(torch::allclose(targets.sum(1), torch::ones({6}), 1e-5, 1e-6));
  // The centre shifts the targets: without it they differ.
  EXPECT_FALSE(torch::allclose(targets, torch::softmax(logits / 0.04, 1), 1e-3, 1e-4));

  at::Tensor c = center.clone();
  update_center(c, logits, 0.9);
  EXPECT_TRUE(torch::allclose(c, 0.9 * center + 0.1 * logits.mean(0, true), 1e-5, 1e-7));

  // Two learners with 2 and 4 rows: the centre follows the mean over all 6 rows,
  // not the mean of the two learners' means.
  FakeGroup group;
  std::array<at::Tensor, 2> centres = {center.clone(), center.clone()};
  std::vector<std::thread> ranks;
  const std::array<at::Tensor, 2> shards = {logits.slice(0, 0, 2), logits.slice(0, 2, 6)};
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      update_center(centres[rank], shards[rank], 0.9,
                    [&, rank](at::Tensor& x) { group.reduce(rank, x, false); });
    });
  for (std::thread& r : ranks) r.join();
  for (const at::Tensor& r : centres) EXPECT_TRUE(torch::allclose(r, c, 1e-5, 1e-7));

  EXPECT_THROW(centred_softmax(logits, torch::zeros({1, 4}), 0.04), std::invalid_argument);
  EXPECT_THROW(centred_softmax(logits, center, 0.0), std::invalid_argument);
}

// teacher_targets uses the centre when one is given, Sinkhorn-Knopp otherwise.
TEST(EmaCentring, TeacherTargetsTakeTheCentreWhenGiven) {
  torch::manual_seed(6);
  const at::Tensor g = torch::randn({4, 8}), f = torch::randn({4, 8});
  ObjectiveOptions o;
  o.teacher_temp = 0.05;
  o.center = torch::randn({1, 8});
  const at::Tensor centred = teacher_targets(g, f, o);
  EXPECT_TRUE(torch::allclose(centred[1], centred_softmax(f, o.center, 0.05), 1e-6, 1e-7));
  o.center = at::Tensor();
  EXPECT_TRUE(torch::allclose(teacher_targets(g, f, o).view({8, 8}),
                              sinkhorn_knopp(torch::cat({g, f}), 0.05, o.sinkhorn), 1e-6, 1e-7));
}

TEST(Sinkhorn, BadInputsThrow) {
  EXPECT_THROW(sinkhorn_knopp(torch::zeros({4}), 0.1), std::invalid_argument);
  EXPECT_THROW(sinkhorn_knopp(torch::zeros({4, 3}), 0.0), std::invalid_argument);
  SinkhornOptions o;
  o.iterations = 0;
  EXPECT_THROW(sinkhorn_knopp(torch::zeros({4, 3}), 0.1, o), std::invalid_argument);
  o.iterations = 3;
  o.subtract_max = true;
  o.all_reduce_sum = [](at::Tensor&) {};
  EXPECT_THROW(sinkhorn_knopp(torch::zeros({4, 3}), 0.1, o), std::invalid_argument);
}

TEST(KoLeo, MatchesDirectComputation) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({9, 5});
  const Matrix m = to_matrix(x);
  Matrix n = m;
  for (auto& row : n) {
    double norm = 0;
    for (double v : row) norm += v * v;
    for (double& v : row) v /= std::max(std::sqrt(norm), 1e-8);
  }
  double loss = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    size_t best = 0;
    double best_dot = -2;
    for (size_t j = 0; j < n.size(); ++j) {
      if (j == i) continue;
      double dot = 0;
      for (size_t d = 0; d < n[i].size(); ++d) dot += n[i][d] * n[j][d];
      if (dot > best_dot) best_dot = dot, best = j;
    }
    double dist = 0;
    for (size_t d = 0; d < n[i].size(); ++d) {
      const double diff = n[i][d] - n[best][d] + 1e-8;
      dist += diff * diff;
    }
    loss -= std::log(std::sqrt(dist) + 1e-8);
  }
  loss /= static_cast<double>(n.size());
  const at::Tensor xg = x.clone().requires_grad_(true);
  const at::Tensor got = koleo_loss(xg);
  EXPECT_NEAR(got.item<double>(), loss, 1e-5);
  got.backward();
  ASSERT_TRUE(xg.grad().defined());
  EXPECT_GT(xg.grad().abs().sum().item<double>(), 0);
  EXPECT_THROW(koleo_loss(torch::randn({1, 5})), std::invalid_argument);
}

double h2(double a, double b, double t0, double t1, double tau) {  // CE of a 2-way softmax
  const double lse = std::log(std::exp(a / tau) + std::exp(b / tau));
  return -(t0 * (a / tau - lse) + t1 * (b / tau - lse));
}

TEST(Loss, EqualsHandComputedValueWithUniformTeacher) {
  // Teacher logits equal everywhere: Sinkhorn-Knopp gives every target (1/2, 1/2).
  // B = 2, K = 2 prototypes, 2 local views, 2 sequential steps.
  ObjectiveOptions o;
  o.teacher_temp = 0.05;
  o.student_temp = 0.1;
  o.koleo_weight = 0.1;
  const at::Tensor teacher = torch::full({2, 2}, 0.3);
  const at::Tensor targets = teacher_targets(teacher, teacher, o);
  EXPECT_TRUE(torch::allclose(targets, torch::full({2, 2, 2}, 0.5)));
  StudentOutputs s;
  s.global = torch::tensor({{0.2, -0.1}, {0.0, 0.4}});
  s.local = torch::tensor({{{0.5, 0.1}, {-0.3, 0.3}}, {{0.0, 0.0}, {0.1, 0.2}}});
  s.sequential = torch::tensor({{{0.3, 0.3}, {1.0, -1.0}}, {{0.2, 0.0}, {-0.2, 0.1}}});
  s.global_token = torch::tensor({{3.0, 0.0}, {0.0, 2.0}});  // normalised: e1, e2
  const LossParts parts = sequential_to_global_loss(targets, s, o);

  const double g = (h2(0.2, -0.1, .5, .5, .1) + h2(0.0, 0.4, .5, .5, .1)) / 2;
  const double l = ((h2(0.5, 0.1, .5, .5, .1) + h2(-0.3, 0.3, .5, .5, .1)) / 2 +
                    (h2(0.0, 0.0, .5, .5, .1) + h2(0.1, 0.2, .5, .5, .1)) / 2) /
                   2;
  const double k1 = (h2(0.3, 0.3, .5, .5, .1) + h2(1.0, -1.0, .5, .5, .1)) / 2;
  const double k2 = (h2(0.2, 0.0, .5, .5, .1) + h2(-0.2, 0.1, .5, .5, .1)) / 2;
  const double dino = 0.5 * (g / 8 + 7 * l / 8 + (k1 + k2) / 2);
  // KoLeo: each token's neighbour is the other; |e1 - e2 + 1e-8| = sqrt(2) (to 1e-8).
  const double koleo = -std::log(std::sqrt(2.0));
  EXPECT_NEAR(parts.global.item<double>(), g, 1e-5);
  EXPECT_NEAR(parts.local.item<double>(), l, 1e-5);
  EXPECT_NEAR(parts.per_step[0].item<double>(), k1, 1e-5);
  EXPECT_NEAR(parts.per_step[1].item<double>(), k2, 1e-5);
  EXPECT_NEAR(parts.dino.item<double>(), dino, 1e-5);
  EXPECT_NEAR(parts.koleo.item<double>(), koleo, 1e-5);
  EXPECT_NEAR(parts.loss.item<double>(), dino + 0.1 * koleo, 1e-5);

  // Other weights (ssl.global_weight, ssl.sequential_weight) move each share.
  o.global_weight = 0.25;
  o.local_weight = 0.75;
  o.sequential_weight = 0.8;
  const LossParts reweighted = sequential_to_global_loss(targets, s, o);
  EXPECT_NEAR(reweighted.dino.item<double>(), 0.2 * (g / 4 + 3 * l / 4) + 0.8 * (k1 + k2) / 2,
              1e-5);
}

TEST(Loss, EqualsIndependentComputationWithSkewedTeacher) {
  // Non-uniform teacher: targets from the reference Sinkhorn over the union of
  // global and final-step logits, each student view against BOTH targets.
  ObjectiveOptions o;
  o.teacher_temp = 0.5;
  o.student_temp = 0.2;
  o.koleo_weight = 0;
  const at::Tensor tg = torch::tensor({{1.0, 0.0, -1.0}, {0.5, 0.2, 0.1}});
  const at::Tensor tf = torch::tensor({{0.0, 2.0, 0.0}, {-0.5, 0.0, 0.5}});
  const Matrix c = reference_sinkhorn(to_matrix(torch::cat({tg, tf})), 0.5, 3);  // rows 0-1 global
  StudentOutputs s;
  s.global = torch::tensor({{0.1, 0.2, 0.3}, {0.3, -0.2, 0.0}});
  s.local = torch::tensor({{{0.0, 1.0, 0.0}, {0.2, 0.2, -0.4}}});
  s.sequential = torch::tensor({{{1.0, 0.0, 0.0}, {0.0, 0.0, 1.0}}});
  auto ce = [&](const Matrix& student, size_t b) {  // mean over the 2 targets
    double lse = 0;
    for (double v : student[b]) lse += std::exp(v / 0.2);
    lse = std::log(lse);
    double h = 0;
    for (size_t target : {b, b + 2})
      for (size_t k = 0; k < 3; ++k) h -= c[target][k] * (student[b][k] / 0.2 - lse) / 2;
    return h;
  };
  auto view = [&](const at::Tensor& v) { return (ce(to_matrix(v), 0) + ce(to_matrix(v), 1)) / 2; };
  const double expected =
      0.5 * (view(s.global) / 8 + 7 * view(s.local[0]) / 8 + view(s.sequential[0]));
  const LossParts parts = sequential_to_global_loss(teacher_targets(tg, tf, o), s, o);
  EXPECT_NEAR(parts.loss.item<double>(), expected, 1e-5);
  EXPECT_EQ(parts.koleo.item<double>(), 0.0);

  // ssl.sequential_targets = "global": the steps against the global-view target alone,
  // the static views unchanged.
  auto ce_global = [&](const Matrix& student, size_t b) {
    double lse = 0;
    for (double v : student[b]) lse += std::exp(v / 0.2);
    lse = std::log(lse);
    double h = 0;
    for (size_t k = 0; k < 3; ++k) h -= c[b][k] * (student[b][k] / 0.2 - lse);
    return h;
  };
  const Matrix seq = to_matrix(s.sequential[0]);
  o.sequential_targets_global = true;
  const double expected_global = 0.5 * (view(s.global) / 8 + 7 * view(s.local[0]) / 8 +
                                        (ce_global(seq, 0) + ce_global(seq, 1)) / 2);
  const LossParts global_parts = sequential_to_global_loss(teacher_targets(tg, tf, o), s, o);
  EXPECT_NEAR(global_parts.loss.item<double>(), expected_global, 1e-5);
  EXPECT_GT(std::abs(expected_global - expected), 1e-3);  // the option changes the loss
}

TEST(Loss, GradientReachesStudentOnlyAndShapesAreChecked) {
  torch::manual_seed(0);
  ObjectiveOptions o;
  // Logits in [-1, 1], as DINOv2's head gives: the default sinkhorn does not
  // subtract the max, so unbounded randn logits / 0.04 could overflow exp.
  const at::Tensor teacher = (torch::rand({4, 16}) * 2 - 1).requires_grad_();
  const at::Tensor targets = teacher_targets(teacher, teacher.flip(0), o);
  EXPECT_FALSE(targets.requires_grad());
  StudentOutputs s;
  s.global = torch::randn({4, 16}, torch::requires_grad());
  s.local = torch::randn({3, 4, 16}, torch::requires_grad());
  s.sequential = torch::randn({5, 4, 16}, torch::requires_grad());
  s.global_token = torch::randn({4, 8}, torch::requires_grad());
  LossParts parts = sequential_to_global_loss(targets, s, o);
  EXPECT_EQ(parts.per_step.size(0), 5);
  parts.loss.backward();
  for (const at::Tensor& t : {s.global, s.local, s.sequential, s.global_token})
    EXPECT_GT(t.grad().abs().sum().item<double>(), 0);
  EXPECT_FALSE(teacher.grad().defined());

  StudentOutputs bad = s;
  bad.local = torch::randn({3, 4, 15});
  EXPECT_THROW(sequential_to_global_loss(targets, bad, o), std::invalid_argument);
  bad = s;
  bad.global_token = at::Tensor();
  EXPECT_THROW(sequential_to_global_loss(targets, bad, o), std::invalid_argument);
  EXPECT_THROW(teacher_targets(teacher, torch::randn({3, 16}), o), std::invalid_argument);
}

TEST(TargetStats, EntropyAndPrototypesInUse) {
  const TargetStats uniform = target_stats(torch::full({4, 8}, 1.0 / 8));
  EXPECT_NEAR(uniform.mean_entropy.item<double>(), std::log(8.0), 1e-5);
  const TargetStats onehot = target_stats(torch::eye(8).slice(0, 0, 5));
  EXPECT_NEAR(onehot.mean_entropy.item<double>(), 0.0, 1e-6);
  EXPECT_EQ(onehot.prototypes_used.item<int64_t>(), 5);
}

}  // namespace
}  // namespace saccade::ssl
