#include "workers/ssl/step_flops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

namespace saccade::ssl {
namespace {

using model::BackboneOptions;
using model::step_flops;

SslViewShapes paper_views() {  // the [views] defaults: ViT-S at the paper's settings
  SslViewShapes v;
  v.global_tokens = 256;
  v.local_tokens = 49;
  v.local_views = 8;
  v.glimpse_tokens = 36 + 64;
  v.glimpses = 8;
  return v;
}

TEST(SslStepFlops, CountsEveryForwardOfTeacherAndStudentAndTheStudentsBackward) {
  BackboneOptions b = BackboneOptions::vit_s();
  b.state_input = BackboneOptions::StateInput::kMemory;  // a carried state costs n_state tokens
  model::DinoHeadOptions h;
  h.in_dim = b.width;
  const SslViewShapes v = paper_views();
  const SslStepFlops f = ssl_step_flops(b, h, v);
  const int64_t head = model::dino_head_flops(h);
  EXPECT_EQ(head, 2 * (384 * 2048 + 2048 * 2048 + 2048 * 256 + 256 * 65536));
  const int64_t global = step_flops(b, 256).forward();
  const int64_t sequence = step_flops(b, 100).forward() + 7 * step_flops(b, 100, true).forward();
  EXPECT_GT(step_flops(b, 100, true).forward(), step_flops(b, 100).forward());
  EXPECT_EQ(f.teacher_forward, global + sequence + 2 * head);
  EXPECT_EQ(f.student_forward,
            global + 8 * step_flops(b, 49).forward() + sequence + (1 + 8 + 8) * head);
  EXPECT_EQ(f.total(), f.teacher_forward + 3 * f.student_forward);
  // ViT-S at the paper's views: about 240 GFLOP per image (a ViT-S forward at 224 px is 4.6).
  EXPECT_GT(f.total(), 200e9);
  EXPECT_LT(f.total(), 300e9);

  const SslStepFlops supervised = ssl_step_flops(b, h, v, /*supervised=*/true);
  EXPECT_EQ(supervised.teacher_forward, 0);
  EXPECT_EQ(supervised.student_forward, f.student_forward);
  SslViewShapes no_locals = v;
  no_locals.local_views = 0;
  EXPECT_EQ(f.student_forward - ssl_step_flops(b, h, no_locals).student_forward,
            8 * (step_flops(b, 49).forward() + head));
}

// The products' FLOPs, written apart from ssl_step_flops, add up to it once what they leave
// out is added back: every forward's patch embedding and state input, and attention's QK^T
// and AV, which the passes' shapes give. Batched glimpses add exactly the carry pass: K - 2
// glimpse forwards without gradient, which are not model FLOPs.
TEST(SslStepFlops, TheStepsProductsAndAttentionAreItsFlopsLessTheEmbedding) {
  BackboneOptions b = BackboneOptions::vit_s();
  b.state_input = BackboneOptions::StateInput::kMemory;
  model::DinoHeadOptions h;
  h.in_dim = b.width;
  const SslViewShapes v = paper_views();
  const int64_t batch = 3;
  const auto scores = [&](int64_t patches, bool carries) {  // QK^T and AV, per image
    const int64_t n = step_flops(b, patches, carries).tokens;
    return b.depth * 2 * n * (2 * n * b.width);
  };
  const auto not_products = [&](int64_t patches, bool carries) {  // per image, one forward
    return step_flops(b, patches, carries).embed + scores(patches, carries);
  };
  const int64_t sequence = not_products(100, false) + 7 * not_products(100, true);
  const int64_t forward_only = not_products(256, false) + sequence;  // the teacher's
  const int64_t student = not_products(256, false) + 8 * not_products(49, false) + sequence;
  const int64_t expected = batch * (ssl_step_flops(b, h, v).total() - forward_only - 3 * student);
  const int64_t sequence_scores = scores(100, false) + 7 * scores(100, true);
  const int64_t expected_scores =
      batch * (scores(256, false) + sequence_scores +
               3 * (scores(256, false) + 8 * scores(49, false) + sequence_scores));
  for (const bool batched : {false, true}) {
    SCOPED_TRACE(batched);
    int64_t model = 0, carry = 0;
    for (const StepProduct& p : step_products(b, h, v, batch, batched)) {
      EXPECT_GT(p.m * p.k * p.n * p.calls, 0) << p.pass << " " << p.layer;
      (p.model_flops ? model : carry) += p.flops();
    }
    EXPECT_EQ(model, expected);
    // Attention's own share, from the passes' shapes.
    int64_t attention = 0;
    for (const StepPass& p : step_passes(b, h, v, batch, batched))
      if (p.model_flops)
        attention += p.calls * b.depth * p.sequences * 2 * p.tokens * (2 * p.tokens * b.width) *
                     (p.backward ? 3 : 1);
    EXPECT_EQ(attention, expected_scores);
    const int64_t carried_rows = batch * step_flops(b, 100, true).tokens;
    const int64_t block = 2 * carried_rows * (4 * 384 * 384 + 2 * 384 * 1536);  // one glimpse
    EXPECT_EQ(carry, batched ? 6 * 12 * block : 0);
  }
  // The shapes the batched student runs: its glimpses 2..K as one pass of 7 x B glimpses.
  const auto products = step_products(b, h, v, batch, true);
  const auto rest = std::find_if(products.begin(), products.end(), [](const StepProduct& p) {
    return p.pass == "student glimpses 2..K" && p.layer == "fc1";
  });
  ASSERT_NE(rest, products.end());
  EXPECT_EQ(rest->m, 7 * batch * (2 * b.n_state + 100));
  EXPECT_EQ(rest->k, 384);
  EXPECT_EQ(rest->n, 1536);
  EXPECT_EQ(rest->calls, 12);
  EXPECT_TRUE(rest->backward);
  EXPECT_THROW(step_products(b, h, v, 0, true), std::invalid_argument);
}

TEST(SslStepFlops, RefusesShapesWithoutGlobalViewOrGlimpses) {
  const BackboneOptions b = BackboneOptions::tiny();
  model::DinoHeadOptions h;
  h.in_dim = b.width;
  SslViewShapes v = paper_views();
  v.glimpses = 0;
  EXPECT_THROW(ssl_step_flops(b, h, v), std::invalid_argument);
  v = paper_views();
  v.global_tokens = 0;
  EXPECT_THROW(ssl_step_flops(b, h, v), std::invalid_argument);
}

}  // namespace
}  // namespace saccade::ssl
