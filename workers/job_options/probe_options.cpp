#include "workers/job_options/probe_options.h"

#include <algorithm>
#include <string>
#include <vector>

namespace saccade::job_options {
namespace {

bool has(const std::vector<std::string>& list, const char* item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace

probe::FeatureOptions feature_options(const JobConfig& config, FeaturesFor which) {
  probe::FeatureOptions o;
  o.threads = static_cast<int>(config.data.loader_threads);
  o.seed = static_cast<uint64_t>(config.job.seed);
  if (which == FeaturesFor::kEvalVit) {
    o.glimpses = 0;
    o.max_images = config.eval.images;
    o.batch_size = config.eval.batch_size;
    o.all_states = true;
    return o;
  }
  const ProbeConfig& p = config.probe;
  o.glimpses = static_cast<int>(p.glimpses);
  o.batch_size = p.batch_size;
  o.max_images = p.train_images;
  o.pixels = has(p.baselines, "pixels");
  o.all_states = has(p.features, "all_states") || p.head == "transformer";
  o.patch_mean = has(p.features, "state_and_patch_mean");
  if (which == FeaturesFor::kProbeValidation) {
    o.max_images = p.val_images;
    o.seed ^= 0x7a1du;  // validation gazes are not the training ones
  }
  return o;
}

probe::EvaluationOptions evaluation_options(const JobConfig& config) {
  probe::EvaluationOptions o;
  o.knn.k = config.probe.knn_k;
  o.knn.temperature = config.probe.knn_temperature;
  o.linear.cs = config.probe.cs;
  o.linear.holdout_fraction = config.probe.holdout_fraction;
  o.linear.max_iterations = config.probe.max_iterations;
  o.linear.seed = static_cast<uint64_t>(config.job.seed);
  return o;
}

probe::TransformerProbeOptions transformer_probe_options(const JobConfig& config, int64_t heads) {
  probe::TransformerProbeOptions o;
  o.lrs = config.probe.head_lrs;
  o.steps = config.probe.head_steps;
  o.heads = heads;
  o.holdout_fraction = config.probe.holdout_fraction;
  o.seed = static_cast<uint64_t>(config.job.seed);
  return o;
}

}  // namespace saccade::job_options
