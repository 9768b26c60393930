// The trainer's GPU paths on a real GPU. CUDA graphs (ssl.cuda_graphs): replays see fresh
// inputs and weights updated in place, a change of shapes recaptures, and a trainer whose
// teacher runs as a graph takes the same steps as one launching it kernel by kernel. The
// batch staged during the step before (ssl.prefetch_to_device) trains as the batch
// uploaded by its own step, views cut on the GPU train as the data plane's patches, a
// step waits for the device once, whoever cuts, and the fused residual add + LayerNorm and
// the MLP with its GELU inside its products train as LibTorch's operations. Every test skips
// itself
// without a CUDA device (they run in the GPU checks, scripts/gpu/run.sh).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include "dataloader/views.h"
#include "model/add_norm.h"
#include "model/fused_linear.h"
#include "model/fused_ops.h"
#include "tests/workers/small_ssl.h"
#include "workers/pretrain/captured_pass.h"
#include "workers/pretrain/ssl_trainer.h"

namespace saccade::pretrain {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TEST(CapturedPass, ReplaysFreshInputsAndWeightsUpdatedInPlace) {
  SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  torch::Tensor w = torch::randn({16, 8}, cuda), b = torch::randn({8}, cuda);
  auto eager = [&](const torch::Tensor& x) { return torch::relu(x.mm(w) + b).sum(1); };
  CapturedPass pass([&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{eager(in[0]), in[1] * 2};
  });
  for (int call = 0; call < 3; ++call) {
    const torch::Tensor x = torch::randn({32, 16}, cuda), y = torch::randn({5}, cuda);
    const std::vector<at::Tensor> out = pass({x, y});
    EXPECT_TRUE(torch::allclose(out[0], eager(x), 1e-5, 1e-5)) << "call " << call;
    EXPECT_TRUE(torch::equal(out[1], y * 2)) << "call " << call;
  }
  EXPECT_EQ(pass.captures(), 1);
  {
    torch::NoGradGuard no_grad;
    w.mul_(-1);  // in place, as AdamW and the EMA update weights
  }
  const torch::Tensor x = torch::randn({32, 16}, cuda);
  EXPECT_TRUE(torch::allclose(pass({x, torch::ones({5}, cuda)})[0], eager(x), 1e-5, 1e-5));
  const torch::Tensor wider = torch::randn({64, 16}, cuda);
  EXPECT_TRUE(torch::allclose(pass({wider, torch::ones({5}, cuda)})[0], eager(wider), 1e-5, 1e-5));
  EXPECT_EQ(pass.captures(), 2) << "a change of shape must recapture";
}

// Two batches of noise images cut with small views, alternated so that a replay reading the
// previous batch's teacher views would show in the losses. `learner_cuts`: the same views
// shipped as images and boxes, for the learner to cut (views.cut_on = "learner").
std::vector<data::SslBatch> batches(bool learner_cuts = false) {
  data::ViewOptions v = testing::small_ssl_views();
  v.cut_on_learner = learner_cuts;
  v.ship_max_side = 4096;
  std::vector<data::SslBatch> out(2);
  cv::RNG rng(11);
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].allocate(v, 8);
    for (int64_t i = 0; i < 8; ++i) {
      cv::Mat image(48, 64, CV_8UC1);
      rng.fill(image, cv::RNG::UNIFORM, 0, 256);
      data::make_ssl_views(v, image, static_cast<uint64_t>(k * 8 + i), i, out[k]);
    }
  }
  return out;
}

ssl::TrainerOptions tiny_trainer(ssl::Precision precision, bool batched, bool graphs,
                                 bool prefetch = false) {
  ssl::TrainerOptions o = testing::small_ssl_trainer(10);
  o.backbone.layerscale_init = 0.1;  // blocks whose outputs differ from image to image
  o.koleo_weight = 0;
  o.device = "cuda:0";
  o.precision = precision;
  o.batched_glimpses = batched;
  o.cuda_graphs = graphs;
  o.prefetch_to_device = prefetch;
  o.time_phases = false;  // as bench step times the step; phases synchronise
  return o;
}

// The teacher's forward and, with batched glimpses, the student's carried-state pass as
// graphs: the same steps as their kernels launched one by one.
TEST(CapturedPass, TheTrainersGraphsTrainAsTheirKernelsLaunchedOneByOne) {
  SKIP_WITHOUT_CUDA();
  const std::vector<data::SslBatch> data = batches();
  for (const ssl::Precision precision : {ssl::Precision::kFp32, ssl::Precision::kBf16Params}) {
    for (const bool batched : {false, true}) {
      const bool fp32 = precision == ssl::Precision::kFp32;
      SCOPED_TRACE(std::string(fp32 ? "fp32" : "bf16-params") + (batched ? ", batched" : ""));
      const double tolerance = fp32 ? 1e-4 : 1e-3;  // relative
      SslTrainer eager(tiny_trainer(precision, batched, false)),
          graph(tiny_trainer(precision, batched, true));
      for (int step = 0; step < 6; ++step) {
        const data::SslBatch& batch = data[static_cast<size_t>(step % 2)];
        const StepStats a = eager.train_step(batch), b = graph.train_step(batch);
        ASSERT_TRUE(std::isfinite(b.loss)) << "step " << step;
        EXPECT_NEAR(b.loss, a.loss, tolerance * std::fabs(a.loss)) << "step " << step;
        EXPECT_NEAR(b.target_entropy, a.target_entropy, tolerance * a.target_entropy)
            << "step " << step;
        EXPECT_NEAR(b.grad_norm, a.grad_norm, 10 * tolerance * a.grad_norm) << "step " << step;
      }
    }
  }
}

// Each step stages the next batch on a side stream while it runs; the step that takes it
// must see exactly the bytes its own upload would have copied (the same losses: the same
// kernels on the same inputs).
TEST(BatchStager, AStagedBatchTrainsAsTheBatchUploadedByItsStep) {
  SKIP_WITHOUT_CUDA();
  const std::vector<data::SslBatch> data = batches();
  for (const bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "with graphs" : "without graphs");
    SslTrainer uploaded(tiny_trainer(ssl::Precision::kFp32, true, graphs)),
        staged(tiny_trainer(ssl::Precision::kFp32, true, graphs, true));
    for (int step = 0; step < 6; ++step) {
      const data::SslBatch& batch = data[static_cast<size_t>(step % 2)];
      const StepStats a = uploaded.train_step(batch),
                      b = staged.train_step(batch, &data[static_cast<size_t>((step + 1) % 2)]);
      // Float rounding only (attention's backward need not be deterministic on a GPU); a
      // wrong or stale batch moves the loss by percents.
      EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << "step " << step;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << step;
    }
    staged.forget_next();
  }
}

// views.cut_on = "learner" on a GPU: the images staged to the device and cut there by the
// CUDA extractor, queued on the step's stream, give the step the bytes the data plane cuts
// (bit-identical patches: the same losses), with and without the next batch staged ahead.
TEST(SslTrainer, CuttingOnTheGpuTrainsAsThePatchesTheDataPlaneCuts) {
  SKIP_WITHOUT_CUDA();
  const std::vector<data::SslBatch> patches = batches(), images = batches(true);
  ASSERT_TRUE(images[0].cut_on_learner());
  for (const bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch ? "prefetching" : "not prefetching");
    SslTrainer shipped(tiny_trainer(ssl::Precision::kFp32, true, false)),
        cut(tiny_trainer(ssl::Precision::kFp32, true, false, prefetch));
    for (int step = 0; step < 6; ++step) {
      const size_t k = static_cast<size_t>(step % 2), next = static_cast<size_t>((step + 1) % 2);
      const StepStats a = shipped.train_step(patches[k]),
                      b = cut.train_step(images[k], prefetch ? &images[next] : nullptr);
      // Float rounding only (attention's backward need not be deterministic on a GPU); a
      // wrong or stale batch moves the loss by percents.
      EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << "step " << step;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << step;
    }
    cut.forget_next();
  }
}

// Counts LibTorch's warnings of synchronising CUDA calls (sync debug mode "warn") on this
// thread while it lives.
class SyncCounter : public c10::WarningHandler {
 public:
  SyncCounter() : guard_(this) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  ~SyncCounter() override {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchroniz") != std::string::npos) ++syncs;
  }
  int syncs = 0;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

// A step queues its work and waits for the device once, to read its figures: a wait in the
// middle (a norm or a count read back, a plain copy of a host array) idles the device while
// the host dispatches what follows.
TEST(SslTrainer, AStepWaitsForTheDeviceOnce) {
  SKIP_WITHOUT_CUDA();
  for (const bool prefetch : {false, true})
    for (const bool learner_cuts : {false, true}) {
      SCOPED_TRACE(std::string(prefetch ? "prefetching" : "not prefetching") +
                   (learner_cuts ? ", cutting the views" : ""));
      const std::vector<data::SslBatch> data = batches(learner_cuts);
      SslTrainer trainer(tiny_trainer(ssl::Precision::kBf16Params, true, false, prefetch));
      auto step = [&](int i) {
        return trainer.train_step(data[static_cast<size_t>(i % 2)],
                                  prefetch ? &data[static_cast<size_t>((i + 1) % 2)] : nullptr);
      };
      for (int i = 0; i < 3; ++i) step(i);  // plans, workspaces and the cut's buffers settle
      int syncs = 0;
      int64_t cut_waits = 0;  // the extractor's own CUDA waits, which sync debug mode cannot see
      {
        SyncCounter counter;
        for (int i = 3; i < 5; ++i) cut_waits += step(i).cut_host_waits;
        syncs = counter.syncs;
      }
      EXPECT_EQ(syncs, 2) << "two steps, one read of their figures each";
      EXPECT_EQ(cut_waits, 0) << "cutting the views waited for the device";
      if (syncs > 2) {  // where the first one is: sync debug mode "error" throws there
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
        try {
          step(5);
        } catch (const c10::Error& e) {
          std::cerr << "first synchronising call of a step: " << e.what() << "\n";
        }
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      }
      trainer.forget_next();
    }
}

// A trainer with a fused operation on (`set(options, true)`) takes the same six steps as one
// with it off, eagerly and inside its CUDA graphs, in fp32 and in bf16-params.
template <typename Set>
void expect_the_same_steps(const Set& set) {
  const std::vector<data::SslBatch> data = batches();
  for (const ssl::Precision precision : {ssl::Precision::kFp32, ssl::Precision::kBf16Params}) {
    for (const bool graphs : {false, true}) {
      const bool fp32 = precision == ssl::Precision::kFp32;
      SCOPED_TRACE(std::string(fp32 ? "fp32" : "bf16-params") + (graphs ? ", graphs" : ""));
      const double tolerance = fp32 ? 1e-4 : 2e-2;  // relative
      ssl::TrainerOptions plain_options = tiny_trainer(precision, true, graphs);
      ssl::TrainerOptions fused_options = plain_options;
      set(plain_options, false);
      set(fused_options, true);
      SslTrainer plain(plain_options), fused(fused_options);
      for (int step = 0; step < 6; ++step) {
        const data::SslBatch& batch = data[static_cast<size_t>(step % 2)];
        const StepStats a = plain.train_step(batch), b = fused.train_step(batch);
        ASSERT_TRUE(std::isfinite(b.loss)) << "step " << step;
        EXPECT_NEAR(b.loss, a.loss, tolerance * std::fabs(a.loss)) << "step " << step;
        EXPECT_NEAR(b.grad_norm, a.grad_norm, 10 * tolerance * a.grad_norm) << "step " << step;
      }
    }
  }
}

// ssl.fused_add_norm on a GPU: the CUDA kernels take the add and the LayerNorm (checked on
// the operation itself), and a trainer built of them takes the same steps as one on
// LibTorch's operations, eagerly and inside its CUDA graphs, in fp32 and in bf16.
TEST(SslTrainer, TheFusedAddAndLayerNormTrainAsLibTorchsOperations) {
  SKIP_WITHOUT_CUDA();
  // The operation at ViT-S's width: values and the gradients of all four inputs against
  // LibTorch's add and layer_norm, with the sum used downstream and not.
  for (const auto type : {torch::kFloat, torch::kBFloat16}) {
    for (const bool use_sum : {true, false}) {
      const bool fp32 = type == torch::kFloat;
      SCOPED_TRACE(std::string(fp32 ? "fp32" : "bf16") + (use_sum ? ", sum used" : ""));
      const double tol = fp32 ? 1e-4 : 1.0 / 32;
      torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({384}).eps(1e-6));
      {
        torch::NoGradGuard no_grad;
        norm->weight.copy_(torch::rand({384}) + 0.5);
        norm->bias.copy_(torch::randn({384}) * 0.1);
      }
      norm->to(torch::kCUDA, type);
      const torch::Tensor x0 = (torch::randn({6, 50, 384}) * 2).to(torch::kCUDA, type);
      const torch::Tensor b0 = torch::randn({6, 50, 384}).to(torch::kCUDA, type);
      const torch::Tensor w1 = torch::randn({6, 50, 384}, torch::kCUDA);
      const torch::Tensor w2 = torch::randn({6, 50, 384}, torch::kCUDA);
      std::vector<torch::Tensor> results[2];
      for (const bool fused : {false, true}) {
        norm->zero_grad();
        const torch::Tensor x = x0.clone().requires_grad_(true);
        const torch::Tensor b = b0.clone().requires_grad_(true);
        const model::AddNormOutput out = [&] {
          const model::FusedScope scope({.add_norm = fused});
          return model::add_layer_norm(x, b, norm);
        }();
        if (fused) {
          ASSERT_NE(out.normed.grad_fn()->name().find("AddLayerNorm"), std::string::npos)
              << out.normed.grad_fn()->name();
        }
        torch::Tensor loss = (out.normed.to(torch::kFloat) * w1).sum();
        if (use_sum) loss = loss + (out.sum.to(torch::kFloat) * w2).sum();
        loss.backward();
        results[fused] = {out.normed, x.grad(), b.grad(), norm->weight.grad().clone(),
                          norm->bias.grad().clone()};
      }
      const char* names[] = {"normed", "x's gradient", "branch's gradient", "weight's gradient",
                             "bias's gradient"};
      for (size_t i = 0; i < results[0].size(); ++i) {
        const torch::Tensor a = results[0][i].to(torch::kFloat),
                            f = results[1][i].to(torch::kFloat);
        const double scale = i >= 3 ? 10 : 1;  // parameter gradients sum 300 rows
        EXPECT_TRUE(torch::allclose(f, a, tol, tol * scale))
            << names[i] << ": largest difference " << (f - a).abs().max().item<float>();
      }
    }
  }
  expect_the_same_steps([](ssl::TrainerOptions& o, bool fused) { o.fused_add_norm = fused; });
}

// `fused` within `tolerance` of `plain`, tensor by tensor, relative to each plain tensor's
// largest value (parameter gradients sum over every row).
void expect_close(const std::vector<torch::Tensor>& plain, const std::vector<torch::Tensor>& fused,
                  double tolerance, const std::vector<std::string>& names) {
  ASSERT_EQ(plain.size(), names.size());
  ASSERT_EQ(fused.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const torch::Tensor a = plain[i].to(torch::kFloat), f = fused[i].to(torch::kFloat);
    const double scale = a.abs().max().item<double>() + 1e-6;
    const double largest = (f - a).abs().max().item<double>();
    EXPECT_LE(largest, tolerance * scale)
        << names[i] << ": largest difference " << largest << " of values up to " << scale;
  }
}

// ssl.fused_mlp on a GPU: cuBLASLt's epilogues take the GELU (checked on the operation
// itself, with and without gradient), and a trainer built of them takes the same steps as one
// on LibTorch's operations, eagerly and inside its CUDA graphs, in fp32 and in bf16.
TEST(SslTrainer, TheMlpWithItsGeluInsideItsProductsTrainsAsLibTorchsOperations) {
  SKIP_WITHOUT_CUDA();
  using Gelu = model::BackboneOptions::Gelu;
  struct Case {
    int64_t rows, in, hidden, out;
  };
  // ViT-S's block MLP over 300 tokens and a narrow one with out != in over 5 (x: 5 images of
  // rows / 5 tokens).
  for (const Case c : {Case{6 * 50, 384, 1536, 384}, Case{5, 64, 256, 32}}) {
    for (const auto type : {torch::kBFloat16, torch::kFloat}) {
      const bool fp32 = type == torch::kFloat;
      SCOPED_TRACE(std::string(fp32 ? "fp32" : "bf16") + ", rows " + std::to_string(c.rows) +
                   ", in " + std::to_string(c.in));
      const auto on = torch::TensorOptions().device(torch::kCUDA, 0).dtype(type);
      const torch::Tensor x0 = torch::randn({5, c.rows / 5, c.in}, on);
      const torch::Tensor w1_0 = torch::randn({c.hidden, c.in}, on) / std::sqrt(c.in);
      const torch::Tensor b1_0 = torch::randn({c.hidden}, on) * 0.5;
      const torch::Tensor w2_0 = torch::randn({c.out, c.hidden}, on) / std::sqrt(c.hidden);
      const torch::Tensor b2_0 = torch::randn({c.out}, on) * 0.5;
      const torch::Tensor probe = torch::randn({x0.size(0), x0.size(1), c.out}, on);
      std::vector<torch::Tensor> results[2];
      for (const bool fused : {false, true}) {
        std::vector<torch::Tensor> in;
        for (const torch::Tensor* t : {&x0, &w1_0, &b1_0, &w2_0, &b2_0})
          in.push_back(t->clone().requires_grad_(true));
        const model::FusedScope scope({.mlp = fused});
        const torch::Tensor y = model::mlp_gelu(in[0], in[1], in[2], in[3], in[4], Gelu::kTanh);
        if (fused) {
          if (fp32 && y.grad_fn()->name().find("MlpGelu") == std::string::npos) {
            std::cout << "note: this cuBLASLt has no float32 GELU epilogues for the shape; "
                         "float32 runs LibTorch's operations\n";
            break;
          }
          ASSERT_NE(y.grad_fn()->name().find("MlpGelu"), std::string::npos) << y.grad_fn()->name();
          torch::NoGradGuard no_grad;  // the forward that writes no pre-activation
          const torch::Tensor inference = model::mlp_gelu(x0, w1_0, b1_0, w2_0, b2_0, Gelu::kTanh);
          const double gap = (inference - y.detach()).abs().max().item<double>();
          EXPECT_LE(gap, (fp32 ? 1e-5 : 1e-2) * (y.abs().max().item<double>() + 1e-6))
              << "with and without gradient the same products";
        }
        (y.to(torch::kFloat) * probe.to(torch::kFloat)).sum().backward();
        results[fused] = {y.detach()};
        for (const torch::Tensor& t : in) results[fused].push_back(t.grad());
      }
      if (results[1].empty()) continue;
      expect_close(results[0], results[1], fp32 ? 1e-4 : 2e-2,
                   {"y", "x's gradient", "W1's gradient", "b1's gradient", "W2's gradient",
                    "b2's gradient"});
    }
  }
  expect_the_same_steps([](ssl::TrainerOptions& o, bool fused) {
    o.backbone.gelu = Gelu::kTanh;
    o.fused_mlp = fused;
  });
}

// ssl.fused_bias_grad on a GPU: a linear layer's weight and bias gradients from one product
// (checked on the operation, alone and as the fused MLP's second layer), and a trainer with it and
// the fused MLP takes the same steps as one on LibTorch's operations.
TEST(SslTrainer, TheLinearLayersBiasGradientsInsideTheirWeightGradientsTrainAsLibTorchs) {
  SKIP_WITHOUT_CUDA();
  using Gelu = model::BackboneOptions::Gelu;
  for (const auto type : {torch::kBFloat16, torch::kFloat}) {
    const bool fp32 = type == torch::kFloat;
    SCOPED_TRACE(fp32 ? "fp32" : "bf16");
    const auto on = torch::TensorOptions().device(torch::kCUDA, 0).dtype(type);
    const torch::Tensor x0 = torch::randn({6, 50, 384}, on);
    const torch::Tensor w0 = torch::randn({1152, 384}, on) / std::sqrt(384.0);
    const torch::Tensor b0 = torch::randn({1152}, on);
    const torch::Tensor w2_0 = torch::randn({384, 1152}, on) / std::sqrt(1152.0);
    const torch::Tensor b2_0 = torch::randn({384}, on);
    std::vector<torch::Tensor> results[2];
    for (const bool fused : {false, true}) {
      std::vector<torch::Tensor> in;
      for (const torch::Tensor* t : {&x0, &w0, &b0, &w2_0, &b2_0})
        in.push_back(t->clone().requires_grad_(true));
      const model::FusedScope scope({.mlp = true, .bias_grad = fused});
      const torch::Tensor y = model::linear_fused(in[0], in[1], in[2]);
      const bool took = y.grad_fn()->name().find("LinearFunction") != std::string::npos;
      if (fp32 && fused && !took) {
        std::cout << "note: this cuBLASLt has no float32 BGRADB epilogue for the shape\n";
        break;
      }
      ASSERT_EQ(took, fused) << y.grad_fn()->name();
      // The MLP on the same weights: its second layer takes the same path.
      const torch::Tensor z = model::mlp_gelu(in[0], in[1], in[2], in[3], in[4], Gelu::kTanh);
      ((y.to(torch::kFloat) * 0.5).sum() + z.to(torch::kFloat).pow(2).sum()).backward();
      results[fused] = {y.detach(), z.detach()};
      for (const torch::Tensor& t : in) results[fused].push_back(t.grad());
    }
    if (results[1].empty()) continue;
    expect_close(results[0], results[1], fp32 ? 1e-4 : 2e-2,
                 {"y", "z", "x's gradient", "W's gradient", "b's gradient", "W2's gradient",
                  "b2's gradient"});
  }
  expect_the_same_steps([](ssl::TrainerOptions& o, bool fused) {
    o.backbone.gelu = Gelu::kTanh;
    o.fused_mlp = true;
    o.fused_bias_grad = fused;
  });
}

}  // namespace
}  // namespace saccade::pretrain
