#include "dataloader/idx_dataset.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <zlib.h>
#include <opencv2/imgproc.hpp>

namespace saccade::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;      // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;      // unsigned byte, 1 dimension
constexpr size_t kMaxFileBytes = size_t{1} << 36;  // 64 GiB: refuse absurd decompressed sizes

// The whole file, gunzipped when it starts with the gzip magic 1f 8b.
std::vector<uint8_t> read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::invalid_argument(
        fmt::format("IDX {} file '{}' cannot be opened (missing or unreadable)", what, path));
  }
  std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;

  if (raw.size() > std::numeric_limits<uInt>::max()) {
    throw std::runtime_error(
        fmt::format("IDX {} file '{}': gzip file of {} bytes is over the 4 GiB supported", what,
                    path, raw.size()));
  }
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header; concatenated members are handled below.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw std::runtime_error(fmt::format("IDX {} file '{}': zlib inflateInit2 failed", what, path));
  }
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(size_t{1} << 20);
  zs.next_in = raw.data();
  zs.avail_in = static_cast<uInt>(raw.size());
  int rc = Z_OK;
  while (true) {
    zs.next_out = chunk.data();
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (rc != Z_OK) break;
    if (out.size() > kMaxFileBytes) {
      inflateEnd(&zs);
      throw std::runtime_error(
          fmt::format("IDX {} file '{}': gzip stream inflates past the {}-byte limit", what, path,
                      kMaxFileBytes));
    }
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      rc = Z_BUF_ERROR;  // input ended inside the stream
      break;
    }
  }
  const std::string message = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    throw std::runtime_error(fmt::format(
        "IDX {} file '{}': gzip stream is corrupt or truncated (zlib code {}{}{}) after {} bytes",
        what, path, rc, message.empty() ? "" : ": ", message, out.size()));
  }
  return out;
}

uint32_t read_be32(const std::vector<uint8_t>& bytes, size_t offset) {
  return (uint32_t{bytes[offset]} << 24) | (uint32_t{bytes[offset + 1]} << 16) |
         (uint32_t{bytes[offset + 2]} << 8) | uint32_t{bytes[offset + 3]};
}

// Validates the header of an IDX file with `ndim` dimensions and returns them;
// the data must follow, exactly as long as the dimensions say.
std::vector<uint32_t> parse_header(const std::vector<uint8_t>& bytes, uint32_t magic, int ndim,
                                   const std::string& path, const char* what) {
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < 4) {
    throw std::runtime_error(
        fmt::format("IDX {} file '{}': magic: file is {} bytes, too short for the 4-byte magic",
                    what, path, bytes.size()));
  }
  const uint32_t found = read_be32(bytes, 0);
  if (found != magic) {
    throw std::runtime_error(fmt::format(
        "IDX {} file '{}': magic: expected 0x{:08x} (uint8 data, {} dimensions), found 0x{:08x}",
        what, path, magic, ndim, found));
  }
  if (bytes.size() < header) {
    throw std::runtime_error(fmt::format(
        "IDX {} file '{}': dimensions: header needs {} bytes for {} dimensions, file has {}", what,
        path, header, ndim, bytes.size()));
  }
  std::vector<uint32_t> dims;
  uint64_t expected = 1;
  for (int d = 0; d < ndim; ++d) {
    dims.push_back(read_be32(bytes, 4 + 4 * static_cast<size_t>(d)));
    if (d > 0 && dims.back() == 0) {
      throw std::runtime_error(fmt::format(
          "IDX {} file '{}': dimension {}: size is 0, expected at least 1", what, path, d));
    }
    expected *= dims.back();  // at most 3 factors below 2^32 each: checked next
    if (expected > kMaxFileBytes) {
      throw std::runtime_error(fmt::format(
          "IDX {} file '{}': dimensions: {} data bytes declared, over the {}-byte limit", what,
          path, expected, kMaxFileBytes));
    }
  }
  const uint64_t data_bytes = bytes.size() - header;
  if (data_bytes != expected) {
    throw std::runtime_error(fmt::format(
        "IDX {} file '{}': data length: header declares {} bytes of data, file holds {}{}", what,
        path, expected, data_bytes, data_bytes < expected ? " (truncated)" : " (trailing bytes)"));
  }
  return dims;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    if (!file) throw std::runtime_error(fmt::format("write_idx: cannot create '{}'", path));
    const int written = gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    const int closed = gzclose(file);
    if (written != static_cast<int>(bytes.size()) || closed != Z_OK) {
      throw std::runtime_error(fmt::format("write_idx: writing gzip file '{}' failed", path));
    }
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(fmt::format("write_idx: writing '{}' failed", path));
}

void append_be32(std::vector<uint8_t>& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    bytes.push_back(static_cast<uint8_t>(value >> shift));
}

}  // namespace

struct IdxDataset::Impl {
  IdxOptions options;
  std::vector<uint8_t> file;  // the whole images file: header, then pixels
  size_t pixels_offset = 0;
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> labels;  // empty when unlabeled
  int64_t num_classes = 0;
  DatasetStats stats;
};

IdxDataset::IdxDataset(IdxOptions options) : impl_(std::make_unique<Impl>()) {
  auto& impl = *impl_;
  if (options.channels != 1 && options.channels != 3) {
    throw std::invalid_argument(
        fmt::format("IdxDataset: channels must be 1 or 3, got {} (images '{}')", options.channels,
                    options.images_path));
  }
  impl.file = read_file(options.images_path, "images");
  const auto dims = parse_header(impl.file, kImagesMagic, 3, options.images_path, "images");
  if (dims[1] > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
      dims[2] > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    throw std::runtime_error(
        fmt::format("IDX images file '{}': dimensions: rows {} x cols {} too large",
                    options.images_path, dims[1], dims[2]));
  }
  impl.pixels_offset = 16;
  impl.count = dims[0];
  impl.rows = static_cast<int>(dims[1]);
  impl.cols = static_cast<int>(dims[2]);
  if (!options.labels_path.empty()) {
    impl.labels = read_file(options.labels_path, "labels");
    const auto label_dims =
        parse_header(impl.labels, kLabelsMagic, 1, options.labels_path, "labels");
    if (label_dims[0] != dims[0]) {
      throw std::invalid_argument(fmt::format(
          "IdxDataset: label count: labels file '{}' holds {} labels but images file '{}' holds {} "
          "images",
          options.labels_path, label_dims[0], options.images_path, dims[0]));
    }
    impl.labels.erase(impl.labels.begin(), impl.labels.begin() + 8);
    const auto max_label = std::max_element(impl.labels.begin(), impl.labels.end());
    impl.num_classes = max_label == impl.labels.end() ? 0 : int64_t{*max_label} + 1;
  }
  impl.options = std::move(options);
}

IdxDataset::~IdxDataset() = default;

int64_t IdxDataset::size() const {
  return impl_->count;
}
int64_t IdxDataset::num_classes() const {
  return impl_->num_classes;
}
int IdxDataset::channels() const {
  return impl_->options.channels;
}
const DatasetStats& IdxDataset::stats() const {
  return impl_->stats;
}
int IdxDataset::rows() const {
  return impl_->rows;
}
int IdxDataset::cols() const {
  return impl_->cols;
}

std::optional<Sample> IdxDataset::get(int64_t index) const {
  const auto& impl = *impl_;
  if (index < 0 || index >= impl.count) {
    throw std::out_of_range(
        fmt::format("IdxDataset::get: index {} outside [0, {})", index, impl.count));
  }
  const size_t plane = static_cast<size_t>(impl.rows) * static_cast<size_t>(impl.cols);
  const uint8_t* pixels =
      impl.file.data() + impl.pixels_offset + plane * static_cast<size_t>(index);
  // The wrapping Mat is read-only here; clone/cvtColor give the sample its own pixels.
  const cv::Mat view(impl.rows, impl.cols, CV_8UC1, const_cast<uint8_t*>(pixels));
  Sample sample;
  if (impl.options.channels == 3) {
    cv::cvtColor(view, sample.image, cv::COLOR_GRAY2RGB);
  } else {
    sample.image = view.clone();
  }
  sample.label = impl.labels.empty() ? -1 : int64_t{impl.labels[static_cast<size_t>(index)]};
  sample.source = fmt::format("idx:{}#{}", impl.options.images_path, index);
  impl_->stats.record_decoded();
  return sample;
}

void write_idx_images(const std::string& path, int64_t count, int rows, int cols,
                      const std::vector<uint8_t>& pixels, bool gzip) {
  if (count < 0 || rows <= 0 || cols <= 0 ||
      pixels.size() != static_cast<size_t>(count) * static_cast<size_t>(rows) * cols) {
    throw std::invalid_argument(fmt::format(
        "write_idx_images: pixels holds {} bytes, expected count {} x rows {} x cols {}",
        pixels.size(), count, rows, cols));
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(16 + pixels.size());
  append_be32(bytes, kImagesMagic);
  append_be32(bytes, static_cast<uint32_t>(count));
  append_be32(bytes, static_cast<uint32_t>(rows));
  append_be32(bytes, static_cast<uint32_t>(cols));
  bytes.insert(bytes.end(), pixels.begin(), pixels.end());
  write_file(path, bytes, gzip);
}

void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels, bool gzip) {
  std::vector<uint8_t> bytes;
  bytes.reserve(8 + labels.size());
  append_be32(bytes, kLabelsMagic);
  append_be32(bytes, static_cast<uint32_t>(labels.size()));
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  write_file(path, bytes, gzip);
}

}  // namespace saccade::data
