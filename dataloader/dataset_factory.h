// Builds a Dataset from a plain description (filled by the TOML config).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dataloader/dataset.h"
#include "dataloader/image_decode.h"

namespace saccade::data {

struct DatasetSpec {
  // "folder" | "shards" | "idx" | "translated" | "cluttered"
  std::string kind;
  // folder: the root holding one subfolder per class.
  std::string root;
  // shards: a folder of .tar files, one .tar or a glob (TarShardOptions::shards).
  std::string shards;
  // idx: the images and labels files (gzipped or not); labels may be empty.
  std::string images_path;
  std::string labels_path;
  // translated / cluttered: the digits come from "idx" (images_path, labels_path)
  // or "folder" (root).
  std::string base_kind = "idx";
  // 0: the format's own (folder and shards 3, idx 1); else 1 (grey) or 3 (RGB).
  int channels = 0;
  // folder and shards: images of more pixels are skipped and counted (data.max_image_pixels).
  int64_t max_image_pixels = kMaxImagePixels;
  // translated / cluttered (RAM protocol); n_clutter is ignored by "translated".
  int canvas_size = 60;
  int n_clutter = 4;
  int clutter_size = 8;
  double item_scale = 1.0;  // the digits resized by this before they are placed
  uint64_t seed = 0;
};

// Throws std::invalid_argument naming the field for an unknown kind or
// base_kind, a missing path, or any error of the dataset's own constructor.
std::shared_ptr<Dataset> make_dataset(const DatasetSpec& spec);

}  // namespace saccade::data
