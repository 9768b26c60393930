#include "workers/job_options/pretrain_options.h"

#include "workers/job_options/data_options.h"

namespace saccade::job_options {

pretrain::KnnMonitorOptions knn_monitor_options(const JobConfig& config) {
  pretrain::KnnMonitorOptions o;
  o.every_steps = config.ssl.knn_every_steps;
  o.train = dataset_spec(config, /*validation=*/false);
  o.val = dataset_spec(config, /*validation=*/true);
  o.bank_images = config.ssl.knn_bank_images;
  o.query_images = config.ssl.knn_query_images;
  o.views = view_options(config);
  o.glimpses = config.probe.glimpses;
  o.k = config.probe.knn_k;
  o.temperature = config.probe.knn_temperature;
  o.seed = static_cast<uint64_t>(config.job.seed);
  return o;
}

}  // namespace saccade::job_options
