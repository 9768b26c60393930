#include "workers/job_options/data_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace saccade::job_options {

data::DatasetSpec dataset_spec(const JobConfig& config, bool validation) {
  const DataConfig& d = config.data;
  data::DatasetSpec spec;
  spec.kind = d.dataset;
  spec.channels = static_cast<int>(d.channels);
  spec.max_image_pixels = d.max_image_pixels;
  spec.canvas_size = static_cast<int>(d.canvas_size);
  spec.n_clutter = static_cast<int>(d.clutter_pieces);
  spec.clutter_size = static_cast<int>(d.clutter_size);
  spec.item_scale = d.item_scale;
  spec.seed = static_cast<uint64_t>(d.seed) +
              (validation ? 1 : 0);  // validation canvases differ from training ones
  if (d.dataset == "folder") {
    spec.root = validation ? d.val_root : d.root;
  } else if (d.dataset == "shards") {
    spec.shards = validation ? d.val_shards : d.shards;
  } else {
    spec.images_path = validation ? d.val_idx_images : d.idx_images;
    spec.labels_path = validation ? d.val_idx_labels : d.idx_labels;
  }
  return spec;
}

data::ViewOptions view_options(const JobConfig& config) {
  const ViewsConfig& v = config.views;
  data::ViewOptions o;
  o.patch_size = static_cast<int>(config.model.patch_size);
  o.channels = static_cast<int>(config.data.channels);
  o.multizoom = static_cast<int>(v.multizoom_patches);
  o.zoom_max = static_cast<float>(v.zoom_max);
  o.fovea_grid = static_cast<int>(v.fovea_grid);
  o.fovea_zoom_min = static_cast<float>(v.fovea_zoom_min);
  o.fovea_zoom_max = static_cast<float>(v.fovea_zoom_max);
  o.glimpses = static_cast<int>(v.glimpses);
  o.global_grid = static_cast<int>(v.global_grid);
  o.global_scale_min = static_cast<float>(v.global_scale_min);
  o.global_scale_max = static_cast<float>(v.global_scale_max);
  o.local_grid = static_cast<int>(v.local_grid);
  o.local_views = static_cast<int>(v.local_views);
  o.local_scale_min = static_cast<float>(v.local_scale_min);
  o.local_scale_max = static_cast<float>(v.local_scale_max);
  o.vit_grid = static_cast<int>(v.vit_grid);
  o.cut_on_learner = v.cut_on == "learner";
  o.ship_max_side = static_cast<int>(v.ship_max_side);
  o.pixel_mean.assign(config.data.pixel_mean.begin(), config.data.pixel_mean.end());
  o.pixel_std.assign(config.data.pixel_std.begin(), config.data.pixel_std.end());
  return o;
}

uint64_t view_seed_root(const JobConfig& config) {
  return static_cast<uint64_t>(config.job.seed) ^ 0x5eedu;
}

data::ShardOptions shard_options(const JobConfig& config, int64_t dataset_size, int world_size,
                                 int rank) {
  data::ShardOptions o;
  o.dataset_size = dataset_size;
  o.world_size = world_size;
  o.rank = rank;
  o.seed = static_cast<uint64_t>(config.job.seed);
  o.shuffle = true;
  o.drop_last = false;
  return o;
}

data::LoaderOptions loader_options(const JobConfig& config, int64_t batch) {
  data::LoaderOptions o;
  o.batch_size = batch;
  o.threads = static_cast<int>(config.data.loader_threads);
  o.queue_depth = static_cast<int>(config.data.queue_depth);
  o.seed = view_seed_root(config);
  return o;
}

int64_t per_rank_batch(const JobConfig& config, int world_size) {
  if (world_size < 1 || config.ssl.batch_size % world_size != 0) {
    throw std::invalid_argument(
        fmt::format("ssl.batch_size: {} images do not split evenly over {} learner(s)",
                    config.ssl.batch_size, world_size));
  }
  return config.ssl.batch_size / world_size;
}

int64_t steps_per_epoch(const JobConfig& config, int64_t dataset_size) {
  if (config.ssl.steps_per_epoch > 0) return config.ssl.steps_per_epoch;
  return std::max<int64_t>(1, dataset_size / config.ssl.batch_size);
}

int resolve_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace saccade::job_options
