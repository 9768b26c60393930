// MNIST's IDX format: images and labels files, gzipped or not.
//
// Layout (big-endian): u32 magic 0x00000803 (unsigned bytes, 3 dimensions) for
// images or 0x00000801 (1 dimension) for labels, then one u32 per dimension
// (count, rows, cols / count), then the uint8 data, row-major. A file starting
// with the gzip magic 1f 8b is decompressed (zlib) first. Both files are read
// whole into memory at construction and validated there; get() never fails.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataloader/dataset.h"

namespace saccade::data {

struct IdxOptions {
  std::string images_path;  // idx3-ubyte file, maybe .gz
  std::string labels_path;  // idx1-ubyte file, maybe .gz; empty: unlabeled (label -1)
  int channels = 1;         // 1: as stored; 3: grey replicated to RGB
};

class IdxDataset final : public Dataset {
 public:
  // Reads and validates both files. Throws std::runtime_error naming the file
  // and the field (magic, dimension, data length, gzip stream) when a file is
  // malformed, and std::invalid_argument for a missing file, channels not 1 or 3,
  // or a label count that differs from the image count.
  explicit IdxDataset(IdxOptions options);
  ~IdxDataset() override;

  int64_t size() const override;
  int64_t num_classes() const override;  // max label + 1; 0 when unlabeled
  int channels() const override;
  std::optional<Sample> get(int64_t index) const override;
  const DatasetStats& stats() const override;

  int rows() const;
  int cols() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owned: pixels and labels, decompressed
};

// Writers, for generated test data and tools. `pixels` holds count*rows*cols
// bytes; gzip selects a gzip-compressed file. Throw std::runtime_error on I/O
// failure and std::invalid_argument on inconsistent sizes.
void write_idx_images(const std::string& path, int64_t count, int rows, int cols,
                      const std::vector<uint8_t>& pixels, bool gzip);
void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels, bool gzip);

}  // namespace saccade::data
