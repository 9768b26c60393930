#include "workers/ssl/schedules.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "common/config.h"
#include "workers/job_options/model_options.h"

namespace saccade::ssl {
namespace {

ScheduleOptions options() {
  ScheduleOptions o;
  o.steps_per_epoch = 10;
  o.schedule_epochs = 30;
  o.lr = 0.002;
  o.min_lr = 1e-6;
  o.warmup_epochs = 5;
  o.weight_decay_start = 0.04;
  o.weight_decay_end = 0.4;
  o.momentum_start = 0.992;
  o.momentum_end = 1.0;
  o.teacher_temp_start = 0.04;
  o.teacher_temp_end = 0.07;
  o.teacher_temp_warmup_epochs = 3;
  o.freeze_last_layer_epochs = 1;
  return o;
}

TEST(Schedules, EndPointsAndWarmupBoundaries) {
  const ScheduleOptions o = options();
  const ScheduleValues first = schedule_at(o, 0);
  EXPECT_EQ(first.lr, 0.0);  // DINOv2 warms up from 0
  EXPECT_EQ(first.weight_decay, 0.04);
  EXPECT_EQ(first.teacher_momentum, 0.992);
  EXPECT_EQ(first.teacher_temp, 0.04);
  EXPECT_TRUE(first.last_layer_frozen);
  EXPECT_EQ(first.last_layer_lr, 0.0);
  // Warmup (50 steps): linspace(0, lr, 50) ends exactly at lr on step 49; the cosine starts at lr.
  EXPECT_EQ(schedule_at(o, 49).lr, 0.002);
  EXPECT_DOUBLE_EQ(schedule_at(o, 50).lr, 0.002);
  EXPECT_LT(schedule_at(o, 51).lr, 0.002);
  EXPECT_NEAR(schedule_at(o, 25).lr, 0.002 * 25 / 49, 1e-15);
  // Teacher temperature: linspace(0.04, 0.07, 30), then constant.
  EXPECT_EQ(schedule_at(o, 29).teacher_temp, 0.07);
  EXPECT_NEAR(schedule_at(o, 1).teacher_temp, 0.04 + 0.03 / 29, 1e-15);
  EXPECT_EQ(schedule_at(o, 30).teacher_temp, 0.07);
  EXPECT_EQ(schedule_at(o, 100000).teacher_temp, 0.07);
  // Last layer frozen for exactly the first epoch.
  EXPECT_TRUE(schedule_at(o, 9).last_layer_frozen);
  EXPECT_FALSE(schedule_at(o, 10).last_layer_frozen);
  EXPECT_EQ(schedule_at(o, 10).last_layer_lr, schedule_at(o, 10).lr);
  // End of the schedule (300 steps) and beyond: the final values, exactly.
  for (int64_t step : {300, 301, 5000}) {
    const ScheduleValues v = schedule_at(o, step);
    EXPECT_EQ(v.lr, 1e-6);
    EXPECT_EQ(v.weight_decay, 0.4);
    EXPECT_EQ(v.teacher_momentum, 1.0);
  }
  // Halfway through the cosine, the mean of the ends.
  EXPECT_NEAR(schedule_at(o, 150).weight_decay, 0.22, 1e-12);
  EXPECT_NEAR(schedule_at(o, 175).lr, (0.002 + 1e-6) / 2, 1e-12);
}

TEST(Schedules, Monotonic) {
  const ScheduleOptions o = options();
  ScheduleValues prev = schedule_at(o, 0);
  for (int64_t step = 1; step <= 320; ++step) {
    const ScheduleValues v = schedule_at(o, step);
    if (step < 50) {
      EXPECT_GT(v.lr, prev.lr) << step;
    } else if (step > 50) {
      EXPECT_LE(v.lr, prev.lr) << step;
    }
    if (step < 300) {
      EXPECT_GT(v.weight_decay, prev.weight_decay) << step;
      EXPECT_GT(v.teacher_momentum, prev.teacher_momentum) << step;
    }
    EXPECT_GE(v.teacher_temp, prev.teacher_temp) << step;
    EXPECT_GE(v.lr, 0.0);
    EXPECT_LE(v.teacher_momentum, 1.0);
    prev = v;
  }
}

TEST(Schedules, LongerScheduleThanTraining) {
  // 100 epochs trained, schedules as if 300 (appendix "Ablation Study").
  SslConfig config;
  config.epochs = 100;
  config.schedule_epochs = 300;
  config.lr = 0.002;
  config.min_lr = 1e-6;
  config.warmup_epochs = 10;
  config.weight_decay_start = 0.04;
  config.weight_decay_end = 0.4;
  config.momentum_start = 0.992;
  config.momentum_end = 1.0;
  config.teacher_temp_start = 0.04;
  config.teacher_temp_end = 0.07;
  config.teacher_temp_warmup_epochs = 30;
  config.freeze_last_layer_epochs = 1;
  const ScheduleOptions o = job_options::schedule_options(config, 4);
  EXPECT_EQ(o.schedule_epochs, 300);
  const ScheduleValues at_end_of_training = schedule_at(o, 100 * 4);
  EXPECT_GT(at_end_of_training.lr, 0.001);  // a third into the cosine, far from min_lr
  EXPECT_LT(at_end_of_training.teacher_momentum, 1.0);
  EXPECT_EQ(schedule_at(o, 300 * 4).teacher_momentum, 1.0);
  config.schedule_epochs = 0;  // 0 = the training length
  EXPECT_EQ(job_options::schedule_options(config, 4).schedule_epochs, 100);
  EXPECT_THROW(job_options::schedule_options(config, 0), std::invalid_argument);
}

// The paper's lr is for a global batch of 1024; DINO scales it linearly, DINOv2 by the square
// root. At batch 32 an unscaled 2e-3 collapses the DINO head (docs/ssl.md).
TEST(Schedules, PeakLrFollowsTheGlobalBatch) {
  SslConfig config = default_config().ssl;
  config.lr = 0.002;
  config.batch_size = 256;
  EXPECT_EQ(config.lr_scaling, "linear");  // the default
  EXPECT_DOUBLE_EQ(job_options::schedule_options(config, 4).lr, 0.0005);
  config.lr_scaling = "sqrt";
  EXPECT_DOUBLE_EQ(job_options::schedule_options(config, 4).lr, 0.001);
  config.lr_scaling = "none";
  EXPECT_DOUBLE_EQ(job_options::schedule_options(config, 4).lr, 0.002);
  config.lr_scaling = "linear";
  config.batch_size = 1024;  // the paper's batch: the lr as given
  EXPECT_DOUBLE_EQ(job_options::schedule_options(config, 4).lr, 0.002);
}

TEST(Schedules, DegenerateAndBadInputs) {
  ScheduleOptions o = options();
  o.warmup_epochs = 0;
  o.teacher_temp_warmup_epochs = 0;
  o.freeze_last_layer_epochs = 0;
  const ScheduleValues v = schedule_at(o, 0);
  EXPECT_EQ(v.lr, 0.002);  // no warmup: the cosine starts at the peak
  EXPECT_EQ(v.teacher_temp, 0.07);
  EXPECT_FALSE(v.last_layer_frozen);
  EXPECT_THROW(schedule_at(o, -1), std::invalid_argument);
  o.steps_per_epoch = 0;
  EXPECT_THROW(schedule_at(o, 0), std::invalid_argument);
  EXPECT_EQ(cosine_schedule(1.0, 2.0, 0, 0, 0.0, 0), 2.0);
}

}  // namespace
}  // namespace saccade::ssl
