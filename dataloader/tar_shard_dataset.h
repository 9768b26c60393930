// Tar shards in the WebDataset layout: each sample is the members KEY.jpg (or
// .jpeg, .png, .bmp, .webp) and KEY.cls (the class index as decimal text) of one
// tar, KEY being the member name without its last extension.
//
// Built for shared parallel file systems: opening reads each shard's byte-offset
// index (dataloader/tar_index.h, cached beside the shard), and get() reads one
// image with a single pread on the shard's file descriptor (one per shard, kept
// open). Indices are deterministic (shards sorted by path, samples in tar order),
// so the sharded sampler and its DataPosition resume work as for folders.
//
// Labels: classes.txt beside the shards (one class name a line, line i = label i,
// written by `saccade data pack`) gives the class count; without it the count is
// the largest label + 1. A sample without .cls is unlabeled (-1). A sample whose
// image fails to decode or whose .cls is not a label in range is skipped and
// counted once in stats(), as corrupt files in folders are; a KEY with no image
// member is left out of the dataset and counted in skipped_without_image().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/image_decode.h"

namespace saccade::data {

struct TarShardOptions {
  // A folder (every *.tar in it), one .tar file, or a glob pattern such as
  // "/data/train/shard-*.tar".
  std::string shards;
  int channels = 3;                            // 3: RGB, 1: grayscale
  int64_t max_image_pixels = kMaxImagePixels;  // larger images are skipped and counted
};

// The shard files `shards` names, sorted. Throws std::invalid_argument naming the
// pattern when it matches no file.
std::vector<std::string> resolve_tar_shards(const std::string& shards);

class TarShardDataset final : public Dataset {
 public:
  // Opens every shard and reads (or builds) its index. Throws std::invalid_argument
  // for bad options or a dataset with no image, std::runtime_error naming the path
  // and byte offset for a shard that is not a tar or is truncated.
  explicit TarShardDataset(TarShardOptions options);
  ~TarShardDataset() override;

  int64_t size() const override;
  int64_t num_classes() const override;
  int channels() const override;
  std::optional<Sample> get(int64_t index) const override;
  const DatasetStats& stats() const override;

  const std::vector<std::string>& shard_paths() const;
  // From classes.txt; empty without one.
  const std::vector<std::string>& class_names() const;
  // "SHARD.tar:MEMBER" of the sample's image, as in Sample::source.
  std::string source(int64_t index) const;
  int64_t skipped_without_image() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace saccade::data
