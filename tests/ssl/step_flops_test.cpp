#include "workers/ssl/step_flops.h"

#include <gtest/gtest.h>

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
