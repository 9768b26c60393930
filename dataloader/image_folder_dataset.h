// A folder of images, one subfolder per class: root/<class>/**/<file>.{jpg,jpeg,png,bmp,webp}.
//
// Classes are the subfolders of root sorted by name (labels 0..n-1); files are
// found recursively inside each class folder (extensions case-insensitive) and
// sorted by path, so indices are the same on every machine. Images of any size
// are decoded on demand with cv::imread; a file that fails to decode (corrupt,
// empty, unreadable) makes get() return std::nullopt, is logged once (spdlog
// warn naming the file) and counted once in stats(), and is never decoded again.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/image_decode.h"

namespace saccade::data {

struct ImageFolderOptions {
  std::string root;  // folder holding one subfolder per class
  int channels = 3;  // 3: RGB (IMREAD_COLOR, BGR->RGB), 1: IMREAD_GRAYSCALE
  int64_t max_image_pixels = kMaxImagePixels;  // larger images are skipped and counted
};

// The files of an image folder in the order ImageFolderDataset indexes them (also
// what `saccade data pack` packs). Throws std::invalid_argument naming the path as
// the constructor does for a missing root, no class folder or no image.
struct ImageFolderListing {
  std::vector<std::string> class_names;
  std::vector<std::string> paths;
  std::vector<int64_t> labels;  // per path: the index of its class folder
};
ImageFolderListing list_image_folder(const std::string& root);

class ImageFolderDataset final : public Dataset {
 public:
  // Scans root. Throws std::invalid_argument naming the path when root does not
  // exist, is not a folder, has no class subfolder or no image file at all, and
  // naming the field when channels is neither 1 nor 3.
  explicit ImageFolderDataset(ImageFolderOptions options);
  ~ImageFolderDataset() override;

  int64_t size() const override;
  int64_t num_classes() const override;
  int channels() const override;
  std::optional<Sample> get(int64_t index) const override;
  const DatasetStats& stats() const override;

  const std::vector<std::string>& class_names() const;
  const std::string& path(int64_t index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owned: file list, per-file state, stats
};

}  // namespace saccade::data
