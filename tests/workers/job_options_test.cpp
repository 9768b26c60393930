// The job config's adapter layer (workers/job_options/): each option comes from
// its config key. Every key below is set to a value no default has, so a field
// mapped from the wrong key, or not at all, fails.
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "workers/job_options/data_options.h"

namespace saccade {
namespace {

JobConfig config_of_odd_values() {
  JobConfig c = default_config();
  c.job.name = "odd-job";
  c.job.seed = 9;
  c.data.dataset = "idx";
  c.data.idx_images = "train-images";
  c.data.idx_labels = "train-labels";
  c.data.val_idx_images = "val-images";
  c.data.val_idx_labels = "val-labels";
  c.data.loader_threads = 3;
  c.data.queue_depth = 5;
  c.model.patch_size = 7;
  c.views.vit_grid = 6;
  c.cluster.max_message_bytes = 12345;
  c.probe.glimpses = 5;
  c.probe.batch_size = 77;
  c.probe.train_images = 123;
  c.probe.val_images = 45;
  c.probe.baselines = {"pixels"};
  c.probe.features = {"first_state", "state_and_patch_mean"};
  c.probe.head = "linear";
  c.probe.knn_k = 7;
  c.probe.knn_temperature = 0.21;
  c.probe.cs = {0.5, 2.0};
  c.probe.holdout_fraction = 0.3;
  c.probe.max_iterations = 55;
  c.probe.head_lrs = {0.01};
  c.probe.head_steps = 33;
  c.policy.steps = 4;
  c.policy.val_images = 21;
  c.policy.sees_state = false;
  c.eval.glimpses = 6;
  c.eval.images = 31;
  c.eval.batch_size = 17;
  c.eval.upscale = "bilinear";
  c.ssl.knn_every_steps = 13;
  c.ssl.knn_bank_images = 40;
  c.ssl.knn_query_images = 20;
  return c;
}

TEST(JobOptions, ShardsAndTheLoaderComeFromJobAndData) {
  const JobConfig c = config_of_odd_values();
  const data::ShardOptions s = job_options::shard_options(c, 1000, 4, 3);
  EXPECT_EQ(s.dataset_size, 1000);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_TRUE(s.shuffle);
  EXPECT_FALSE(s.drop_last);

  const data::LoaderOptions l = job_options::loader_options(c, 64);
  EXPECT_EQ(l.batch_size, 64);
  EXPECT_EQ(l.threads, 3);
  EXPECT_EQ(l.queue_depth, 5);
  EXPECT_EQ(l.seed, job_options::view_seed_root(c));
}

}  // namespace
}  // namespace saccade
