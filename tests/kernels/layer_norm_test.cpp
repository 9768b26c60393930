// The fused residual add + LayerNorm's CPU loop against a double-precision reference: the
// forward's formula, and the backward against central differences of that formula (so a
// wrong gradient formula, a gradient sent to the wrong output or a lost residual gradient
// shows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/device_math.h"
#include "kernels/layer_norm.h"

namespace saccade::kernels {
namespace {

struct Problem {
  int rows, width;
  std::vector<float> x, branch, gamma, beta, dy, d_sum;
};

Problem draw(int rows, int width, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  Problem p{rows, width, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<float>& v, size_t count, float scale, float shift) {
    v.resize(count);
    for (float& e : v) e = shift + scale * n(rng);
  };
  const size_t values = static_cast<size_t>(rows) * width;
  fill(p.x, values, 2.0f, 0.5f);
  fill(p.branch, values, 0.5f, 0.0f);
  fill(p.gamma, static_cast<size_t>(width), 0.3f, 1.0f);
  fill(p.beta, static_cast<size_t>(width), 0.1f, 0.0f);
  fill(p.dy, values, 1.0f, 0.0f);
  fill(p.d_sum, values, 1.0f, 0.0f);
  return p;
}

// y of one row in double, from the row's sum.
std::vector<double> normalised(const std::vector<double>& s, const Problem& p, double eps) {
  double mean = 0, var = 0;
  for (double v : s) mean += v;
  mean /= s.size();
  for (double v : s) var += (v - mean) * (v - mean);
  const double rstd = 1 / std::sqrt(var / s.size() + eps);
  std::vector<double> y(s.size());
  for (size_t j = 0; j < s.size(); ++j) y[j] = (s[j] - mean) * rstd * p.gamma[j] + p.beta[j];
  return y;
}

constexpr float kEps = 1e-6f;

TEST(AddLayerNorm, ForwardIsTheAddThenTheNormalisation) {
  const Problem p = draw(37, 48, 1);
  std::vector<float> sum(p.x.size()), y(p.x.size()), mean(37), rstd(37);
  add_layer_norm_forward({37, 48, FloatType::kFloat32},
                         {p.x.data(), p.branch.data(), p.gamma.data(), p.beta.data(), sum.data(),
                          y.data(), mean.data(), rstd.data()},
                         kEps, 2);
  for (int r = 0; r < 37; ++r) {
    std::vector<double> s(48);
    for (int j = 0; j < 48; ++j) s[j] = p.x[r * 48 + j] + p.branch[r * 48 + j];
    const std::vector<double> expected = normalised(s, p, kEps);
    for (int j = 0; j < 48; ++j) {
      ASSERT_FLOAT_EQ(sum[r * 48 + j], p.x[r * 48 + j] + p.branch[r * 48 + j]);
      ASSERT_NEAR(y[r * 48 + j], expected[j], 2e-5) << "row " << r << " value " << j;
    }
  }
}

// Backward against central differences of L = sum(dy * y) + sum(d_sum * sum) in double.
void check_backward(bool with_residual_gradient) {
  const int rows = 5, width = 24;
  const Problem p = draw(rows, width, with_residual_gradient ? 2 : 3);
  std::vector<float> sum(p.x.size()), y(p.x.size()), mean(rows), rstd(rows);
  add_layer_norm_forward({rows, width, FloatType::kFloat32},
                         {p.x.data(), p.branch.data(), p.gamma.data(), p.beta.data(), sum.data(),
                          y.data(), mean.data(), rstd.data()},
                         kEps, 1);
  std::vector<float> dx(p.x.size()), d_gamma(width), d_beta(width);
  add_layer_norm_backward(
      {rows, width, FloatType::kFloat32},
      {p.dy.data(), sum.data(), mean.data(), rstd.data(), p.gamma.data(),
       with_residual_gradient ? p.d_sum.data() : nullptr, dx.data(), d_gamma.data(), d_beta.data()},
      2);
  auto loss = [&](const Problem& q) {
    double l = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<double> s(width);
      for (int j = 0; j < width; ++j) s[j] = double{q.x[r * width + j]} + q.branch[r * width + j];
      const std::vector<double> yr = normalised(s, q, kEps);
      for (int j = 0; j < width; ++j) {
        l += q.dy[r * width + j] * yr[j];
        if (with_residual_gradient) l += q.d_sum[r * width + j] * s[j];
      }
    }
    return l;
  };
  const double h = 1e-3;
  auto derivative = [&](std::vector<float> Problem::*field, size_t i) {
    Problem q = p;
    (q.*field)[i] += static_cast<float>(h);
    const double up = loss(q);
    (q.*field)[i] -= static_cast<float>(2 * h);
    return (up - loss(q)) / (2 * h);
  };
  for (size_t i = 0; i < p.x.size(); i += 7) {
    EXPECT_NEAR(dx[i], derivative(&Problem::x, i), 2e-3) << "dx " << i;
    EXPECT_NEAR(dx[i], derivative(&Problem::branch, i), 2e-3) << "d branch " << i;
  }
  for (int j = 0; j < width; ++j) {
    EXPECT_NEAR(d_gamma[j], derivative(&Problem::gamma, static_cast<size_t>(j)), 2e-3) << j;
    EXPECT_NEAR(d_beta[j], derivative(&Problem::beta, static_cast<size_t>(j)), 2e-3) << j;
  }
}

TEST(AddLayerNorm, BackwardIsTheDerivative) {
  check_backward(false);
}

TEST(AddLayerNorm, BackwardAddsTheResidualGradient) {
  check_backward(true);
}

TEST(AddLayerNorm, ParameterGradientsDoNotDependOnThreads) {
  const int rows = 1000, width = 32;
  const Problem p = draw(rows, width, 4);
  std::vector<float> sum(p.x.size()), y(p.x.size()), mean(rows), rstd(rows);
  add_layer_norm_forward({rows, width, FloatType::kFloat32},
                         {p.x.data(), p.branch.data(), p.gamma.data(), p.beta.data(), sum.data(),
                          y.data(), mean.data(), rstd.data()},
                         kEps, 2);
  std::vector<float> dx(p.x.size()), dg1(width), db1(width), dg2(width), db2(width);
  for (auto [threads, dg, db] : {std::tuple{1, &dg1, &db1}, std::tuple{2, &dg2, &db2}})
    add_layer_norm_backward({rows, width, FloatType::kFloat32},
                            {p.dy.data(), sum.data(), mean.data(), rstd.data(), p.gamma.data(),
                             nullptr, dx.data(), dg->data(), db->data()},
                            threads);
  for (int j = 0; j < width; ++j) {
    double beta = 0;
    for (int r = 0; r < rows; ++r) beta += p.dy[r * width + j];
    EXPECT_NEAR(db1[j], beta, 1e-3) << j;
    EXPECT_NEAR(dg1[j], dg2[j], 1e-3 * std::abs(dg1[j]) + 1e-4) << j;
    EXPECT_NEAR(db1[j], db2[j], 1e-3 * std::abs(db1[j]) + 1e-4) << j;
  }
}

TEST(AddLayerNorm, Bf16RoundsTheSumBeforeNormalising) {
  const int rows = 3, width = 16;
  const Problem p = draw(rows, width, 5);
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<std::uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits(v[i]);
    return out;
  };
  const auto x = bf16(p.x), branch = bf16(p.branch), gamma = bf16(p.gamma), beta = bf16(p.beta);
  std::vector<std::uint16_t> sum(x.size()), y(x.size());
  std::vector<float> mean(rows), rstd(rows);
  add_layer_norm_forward({rows, width, FloatType::kBFloat16},
                         {x.data(), branch.data(), gamma.data(), beta.data(), sum.data(), y.data(),
                          mean.data(), rstd.data()},
                         kEps, 1);
  Problem rounded = p;
  for (int j = 0; j < width; ++j) {
    rounded.gamma[j] = float_of_bf16(gamma[j]);
    rounded.beta[j] = float_of_bf16(beta[j]);
  }
  for (int r = 0; r < rows; ++r) {
    std::vector<double> s(width);
    for (int j = 0; j < width; ++j) {
      const size_t i = static_cast<size_t>(r) * width + j;
      const std::uint16_t expected = bf16_bits(float_of_bf16(x[i]) + float_of_bf16(branch[i]));
      ASSERT_EQ(sum[i], expected) << i;
      s[j] = float_of_bf16(expected);
    }
    const std::vector<double> ys = normalised(s, rounded, kEps);
    for (int j = 0; j < width; ++j)
      EXPECT_NEAR(float_of_bf16(y[static_cast<size_t>(r) * width + j]), ys[j],
                  std::abs(ys[j]) / 128 + 1e-3)
          << "row " << r << " value " << j;
  }
}

TEST(AddLayerNorm, RefusesAMissingBufferByName) {
  std::vector<float> v(8), stats(1);
  AddNormForward f{v.data(), v.data(), v.data(),     v.data(),
                   v.data(), nullptr,  stats.data(), stats.data()};
  try {
    add_layer_norm_forward({1, 8, FloatType::kFloat32}, f, kEps);
    FAIL() << "a null y was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("y is null"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add_layer_norm_forward({1, 0, FloatType::kFloat32}, f, kEps), std::invalid_argument);
}

}  // namespace
}  // namespace saccade::kernels
