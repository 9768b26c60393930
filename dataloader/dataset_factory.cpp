#include "dataloader/dataset_factory.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "dataloader/idx_dataset.h"
#include "dataloader/image_folder_dataset.h"
#include "dataloader/resized_dataset.h"
#include "dataloader/tar_shard_dataset.h"
#include "dataloader/translated_dataset.h"

namespace saccade::data {
namespace {

std::shared_ptr<Dataset> make_plain(const std::string& kind, const DatasetSpec& spec,
                                    const char* field) {
  if (kind == "folder") {
    if (spec.root.empty()) {
      throw std::invalid_argument("make_dataset: root is required for a folder dataset");
    }
    return std::make_shared<ImageFolderDataset>(ImageFolderOptions{
        spec.root, spec.channels == 0 ? 3 : spec.channels, spec.max_image_pixels});
  }
  if (kind == "shards") {
    if (spec.shards.empty()) {
      throw std::invalid_argument("make_dataset: shards is required for a shards dataset");
    }
    return std::make_shared<TarShardDataset>(TarShardOptions{
        spec.shards, spec.channels == 0 ? 3 : spec.channels, spec.max_image_pixels});
  }
  if (kind == "idx") {
    if (spec.images_path.empty()) {
      throw std::invalid_argument("make_dataset: images_path is required for an idx dataset");
    }
    return std::make_shared<IdxDataset>(
        IdxOptions{spec.images_path, spec.labels_path, spec.channels == 0 ? 1 : spec.channels});
  }
  throw std::invalid_argument(
      fmt::format("make_dataset: {} must be \"folder\", \"shards\" or \"idx\"{}, got \"{}\"", field,
                  std::string(field) == "kind" ? ", \"translated\" or \"cluttered\"" : "", kind));
}

}  // namespace

std::shared_ptr<Dataset> make_dataset(const DatasetSpec& spec) {
  if (spec.kind == "translated" || spec.kind == "cluttered") {
    TranslationOptions options;
    options.canvas_size = spec.canvas_size;
    options.n_clutter = spec.kind == "cluttered" ? spec.n_clutter : 0;
    options.clutter_size = spec.clutter_size;
    options.seed = spec.seed;
    std::shared_ptr<const Dataset> digits = make_plain(spec.base_kind, spec, "base_kind");
    if (!(spec.item_scale > 0)) {
      throw std::invalid_argument(
          fmt::format("make_dataset: item_scale must be > 0, got {}", spec.item_scale));
    }
    if (spec.item_scale != 1.0) {
      digits = std::make_shared<ResizedDataset>(std::move(digits), spec.item_scale,
                                                /*bilinear=*/true);
    }
    return std::make_shared<TranslatedDataset>(std::move(digits), options);
  }
  return make_plain(spec.kind, spec, "kind");
}

}  // namespace saccade::data
