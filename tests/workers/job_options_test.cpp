// The job config's adapter layer (workers/job_options/): each option comes from
// its config key. Every key below is set to a value no default has, so a field
// mapped from the wrong key, or not at all, fails.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "control/control.h"
#include "control/placement.h"
#include "tests/support/temp_dir.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/link_options.h"
#include "workers/job_options/model_options.h"
#include "workers/job_options/pretrain_options.h"
#include "workers/job_options/probe_options.h"
#include "workers/job_options/remote_batch_options.h"

namespace saccade {
namespace {

using job_options::FeaturesFor;
using job_options::GazeEvalFor;

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
  c.data.max_image_pixels = 4321;
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

control::Assignment a_learner() {
  control::Assignment me;
  me.role = wire::Role::LEARNER;
  me.rank = 2;
  me.node = "node-b";
  me.peers = {"tcp://node-a:5000", "ipc:///tmp/d1"};
  return me;
}

TEST(JobOptions, ProbeFeaturesComeFromProbeAndEvalFeaturesFromEval) {
  JobConfig c = config_of_odd_values();
  const probe::FeatureOptions train = job_options::feature_options(c, FeaturesFor::kProbeTrain);
  EXPECT_EQ(train.glimpses, 5);
  EXPECT_EQ(train.batch_size, 77);
  EXPECT_EQ(train.max_images, 123);
  EXPECT_EQ(train.threads, 3);
  EXPECT_EQ(train.seed, 9u);
  EXPECT_TRUE(train.pixels);       // probe.baselines has "pixels"
  EXPECT_FALSE(train.all_states);  // neither all_states nor the transformer head
  EXPECT_TRUE(train.patch_mean);   // probe.features has "state_and_patch_mean"
  EXPECT_FALSE(train.on_progress);

  const probe::FeatureOptions val = job_options::feature_options(c, FeaturesFor::kProbeValidation);
  EXPECT_EQ(val.max_images, 45);
  EXPECT_EQ(val.seed, 9u ^ 0x7a1du);  // other gazes than the training images'
  EXPECT_EQ(val.glimpses, 5);
  EXPECT_EQ(val.batch_size, 77);
  EXPECT_TRUE(val.pixels);
  EXPECT_TRUE(val.patch_mean);

  c.probe.head = "transformer";  // reads every state token
  EXPECT_TRUE(job_options::feature_options(c, FeaturesFor::kProbeTrain).all_states);
  c.probe.head = "linear";
  c.probe.features = {"all_states"};
  c.probe.baselines = {};
  const probe::FeatureOptions rows = job_options::feature_options(c, FeaturesFor::kProbeTrain);
  EXPECT_TRUE(rows.all_states);
  EXPECT_FALSE(rows.patch_mean);
  EXPECT_FALSE(rows.pixels);

  c = config_of_odd_values();
  const probe::FeatureOptions vit = job_options::feature_options(c, FeaturesFor::kEvalVit);
  EXPECT_EQ(vit.glimpses, 0);  // ViT mode only
  EXPECT_EQ(vit.max_images, 31);
  EXPECT_EQ(vit.batch_size, 17);
  EXPECT_EQ(vit.threads, 3);
  EXPECT_TRUE(vit.all_states);  // the transformer head's input
  EXPECT_FALSE(vit.pixels);     // probe.baselines is the probe's
  EXPECT_FALSE(vit.patch_mean);
}

TEST(JobOptions, ProbeHeadsComeFromProbe) {
  const JobConfig c = config_of_odd_values();
  const probe::EvaluationOptions e = job_options::evaluation_options(c);
  EXPECT_EQ(e.knn.k, 7);
  EXPECT_DOUBLE_EQ(e.knn.temperature, 0.21);
  EXPECT_EQ(e.linear.cs, std::vector<double>({0.5, 2.0}));
  EXPECT_DOUBLE_EQ(e.linear.holdout_fraction, 0.3);
  EXPECT_EQ(e.linear.max_iterations, 55);
  EXPECT_EQ(e.linear.seed, 9u);

  const probe::TransformerProbeOptions t = job_options::transformer_probe_options(c, 6);
  EXPECT_EQ(t.lrs, std::vector<double>({0.01}));
  EXPECT_EQ(t.steps, 33);
  EXPECT_EQ(t.heads, 6);
  EXPECT_DOUBLE_EQ(t.holdout_fraction, 0.3);
  EXPECT_EQ(t.seed, 9u);
}

TEST(JobOptions, GazeEvaluationsOfThePolicyAndTheEvalStage) {
  JobConfig c = config_of_odd_values();
  const policy::GazeEvalOptions p = job_options::gaze_eval_options(c, GazeEvalFor::kPolicyStage);
  EXPECT_EQ(p.steps, 4);  // policy.steps
  EXPECT_EQ(p.max_images, 21);
  EXPECT_EQ(p.batch_size, 17);
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.seed, 9u ^ 0x5eedu);
  EXPECT_TRUE(p.state_blind);  // policy.sees_state = false
  EXPECT_EQ(p.policy_version, 0u);
  EXPECT_FALSE(p.bilinear_upscale);

  const policy::GazeEvalOptions e = job_options::gaze_eval_options(c, GazeEvalFor::kEvalStage);
  EXPECT_EQ(e.steps, 6);  // eval.glimpses
  EXPECT_EQ(e.max_images, 31);
  EXPECT_EQ(e.batch_size, 17);
  EXPECT_EQ(e.threads, 3);
  EXPECT_EQ(e.seed, 9u ^ 0xe7a1u);
  EXPECT_TRUE(e.state_blind);
  EXPECT_EQ(e.policy_version, 1u);
  EXPECT_TRUE(e.bilinear_upscale);
  EXPECT_DOUBLE_EQ(e.scale, 1.0);

  c.policy.sees_state = true;
  c.eval.upscale = "nearest";
  EXPECT_FALSE(job_options::gaze_eval_options(c, GazeEvalFor::kPolicyStage).state_blind);
  EXPECT_FALSE(job_options::gaze_eval_options(c, GazeEvalFor::kEvalStage).state_blind);
  EXPECT_FALSE(job_options::gaze_eval_options(c, GazeEvalFor::kEvalStage).bilinear_upscale);
}

TEST(JobOptions, KnnMonitorComesFromSslKnnAndProbe) {
  const JobConfig c = config_of_odd_values();
  const pretrain::KnnMonitorOptions o = job_options::knn_monitor_options(c);
  EXPECT_EQ(o.every_steps, 13);
  EXPECT_EQ(o.bank_images, 40);
  EXPECT_EQ(o.query_images, 20);
  EXPECT_EQ(o.train.images_path, "train-images");
  EXPECT_EQ(o.train.labels_path, "train-labels");
  EXPECT_EQ(o.val.images_path, "val-images");
  EXPECT_EQ(o.val.labels_path, "val-labels");
  EXPECT_EQ(o.views.patch_size, 7);
  EXPECT_EQ(o.views.vit_grid, 6);
  EXPECT_EQ(o.glimpses, 5);  // probe.glimpses
  EXPECT_EQ(o.k, 7);
  EXPECT_DOUBLE_EQ(o.temperature, 0.21);
  EXPECT_EQ(o.seed, 9u);
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

TEST(JobOptions, DatasetsComeFromData) {
  const JobConfig c = config_of_odd_values();
  for (const bool validation : {false, true}) {
    const data::DatasetSpec d = job_options::dataset_spec(c, validation);
    EXPECT_EQ(d.kind, "idx");
    EXPECT_EQ(d.images_path, validation ? "val-images" : "train-images");
    EXPECT_EQ(d.labels_path, validation ? "val-labels" : "train-labels");
    EXPECT_EQ(d.max_image_pixels, 4321);
  }
}

TEST(JobOptions, PeerLinksCarryTheActorTheJobAndItsKeys) {
  JobConfig c = config_of_odd_values();
  const control::Assignment me = a_learner();
  job_options::PeerLink client = job_options::peer_link(c, me, /*as_server=*/false);
  EXPECT_FALSE(client.security.curve);
  EXPECT_EQ(client.sender.job_id, "odd-job");
  EXPECT_EQ(client.sender.role, wire::Role::LEARNER);
  EXPECT_EQ(client.sender.rank, 2);
  EXPECT_EQ(client.sender.node, "node-b");
  EXPECT_EQ(client.expect.job_id, "odd-job");
  EXPECT_EQ(client.expect.max_frame_bytes, 12345u);

  const testing::TempDir keys("job-options");
  control::write_key_files(keys.path());
  c.security.curve = true;
  c.security.server_key = (keys.path() / "server.key").string();
  c.security.server_public_key = (keys.path() / "server.pub").string();
  c.security.client_key = (keys.path() / "client.key").string();
  const control::CurveKeys server = control::read_key_file(c.security.server_key, true);
  const control::CurveKeys client_keys = control::read_key_file(c.security.client_key, true);
  client = job_options::peer_link(c, me, /*as_server=*/false);
  EXPECT_TRUE(client.security.curve);
  EXPECT_EQ(client.security.server_public, server.public_key);
  EXPECT_TRUE(client.security.server_secret.empty());  // a client never holds it
  EXPECT_EQ(client.security.client.secret_key, client_keys.secret_key);

  control::Assignment data_actor;
  data_actor.role = wire::Role::DATA;
  data_actor.rank = 1;
  data_actor.node = "node-a";
  data_actor.endpoint = "tcp://node-a:5000";
  data_actor.local_endpoint = "ipc:///tmp/d1";
  const runtime::RequestServerOptions s = job_options::request_server_options(c, data_actor);
  EXPECT_EQ(s.endpoint, "tcp://node-a:5000");
  EXPECT_EQ(s.local_endpoint, "ipc:///tmp/d1");
  EXPECT_TRUE(s.security.curve);
  EXPECT_EQ(s.security.server_secret, server.secret_key);  // a server holds the job's pair
  EXPECT_EQ(s.security.client.public_key, client_keys.public_key);
  EXPECT_EQ(s.sender.role, wire::Role::DATA);
  EXPECT_EQ(s.sender.rank, 1);
  EXPECT_EQ(s.sender.node, "node-a");
  EXPECT_EQ(s.sender.job_id, "odd-job");
  EXPECT_EQ(s.expect.max_frame_bytes, 12345u);
}

TEST(JobOptions, RemoteBatchesOfALearnerCarryItsLink) {
  const JobConfig c = config_of_odd_values();
  const control::Assignment me = a_learner();
  const data::ShardOptions shard = job_options::shard_options(c, 100, 4, 2);
  const data_plane::RemoteSourceOptions o = job_options::batch_source_options(c, me, shard, 8);
  EXPECT_EQ(o.endpoints, me.peers);
  EXPECT_EQ(o.shard.rank, 2);
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.queue_depth, 5);
  EXPECT_EQ(o.seed, job_options::view_seed_root(c));
  EXPECT_EQ(o.sender.role, wire::Role::LEARNER);
  EXPECT_EQ(o.sender.rank, 2);
  EXPECT_EQ(o.sender.node, "node-b");
  EXPECT_EQ(o.sender.job_id, "odd-job");
  EXPECT_EQ(o.expect.max_frame_bytes, 12345u);
}

}  // namespace
}  // namespace saccade
