#include "dataloader/image_folder_dataset.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/file_bytes.h"
#include "dataloader/image_decode.h"

namespace saccade::data {
namespace fs = std::filesystem;

namespace {

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp" || ext == ".webp";
}

// The image at path, or an empty Mat with the reason when it cannot be read or decoded.
cv::Mat decode(const std::string& path, int channels, int64_t max_pixels, std::string* reason) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    *reason = "cannot stat: " + ec.message();
    return {};
  }
  if (size == 0) {
    *reason = "empty file";
    return {};
  }
  std::string bytes;
  try {
    bytes = read_file_bytes(path);
  } catch (const std::runtime_error& e) {
    *reason = e.what();
    return {};
  }
  return decode_image(bytes.data(), bytes.size(), channels, max_pixels, reason);
}

}  // namespace

ImageFolderListing list_image_folder(const std::string& root_path) {
  const fs::path root(root_path);
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    throw std::invalid_argument(
        fmt::format("ImageFolderDataset: root '{}' does not exist", root_path));
  }
  if (!fs::is_directory(root, ec)) {
    throw std::invalid_argument(
        fmt::format("ImageFolderDataset: root '{}' is not a folder", root_path));
  }
  std::vector<fs::path> class_dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && !name.empty() && name[0] != '.') class_dirs.push_back(entry.path());
  }
  if (class_dirs.empty()) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderDataset: root '{}' has no class subfolders (expected root/<class>/<image>)",
        root_path));
  }
  std::sort(class_dirs.begin(), class_dirs.end());
  ImageFolderListing listing;
  for (size_t label = 0; label < class_dirs.size(); ++label) {
    listing.class_names.push_back(class_dirs[label].filename().string());
    std::vector<std::string> files;
    const auto walk_options = fs::directory_options::follow_directory_symlink |
                              fs::directory_options::skip_permission_denied;
    for (const auto& entry : fs::recursive_directory_iterator(class_dirs[label], walk_options)) {
      if (entry.is_regular_file() && has_image_extension(entry.path())) {
        files.push_back(entry.path().string());
      }
    }
    if (files.empty()) {
      spdlog::warn("ImageFolderDataset: class folder '{}' holds no image file",
                   class_dirs[label].string());
    }
    std::sort(files.begin(), files.end());
    for (auto& file : files) {
      listing.paths.push_back(std::move(file));
      listing.labels.push_back(static_cast<int64_t>(label));
    }
  }
  if (listing.paths.empty()) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderDataset: root '{}' has {} class folders but no .jpg/.jpeg/.png/.bmp/.webp file",
        root_path, class_dirs.size()));
  }
  return listing;
}

struct ImageFolderDataset::Impl {
  ImageFolderOptions options;
  std::vector<std::string> class_names;
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  std::unique_ptr<std::atomic<bool>[]> corrupt;  // per file: never decoded again once set
  DatasetStats stats;
};

ImageFolderDataset::ImageFolderDataset(ImageFolderOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!SACCADE_HAS_IMAGE_CODECS) {
    // JPEGs decode through TurboJPEG in every build; other formats need imgcodecs.
    spdlog::info(
        "ImageFolderDataset ('{}'): this build decodes JPEGs only (SACCADE_IMAGE_CODECS=OFF): "
        "other image files are skipped and counted as undecodable",
        options.root);
  }
  if (options.channels != 1 && options.channels != 3) {
    throw std::invalid_argument(
        fmt::format("ImageFolderDataset: channels must be 1 or 3, got {} (root '{}')",
                    options.channels, options.root));
  }
  auto listing = list_image_folder(options.root);
  auto& impl = *impl_;
  impl.class_names = std::move(listing.class_names);
  impl.paths = std::move(listing.paths);
  impl.labels = std::move(listing.labels);
  impl.corrupt = std::make_unique<std::atomic<bool>[]>(impl.paths.size());
  for (size_t i = 0; i < impl.paths.size(); ++i) impl.corrupt[i].store(false);
  impl.options = std::move(options);
}

ImageFolderDataset::~ImageFolderDataset() = default;

int64_t ImageFolderDataset::size() const {
  return static_cast<int64_t>(impl_->paths.size());
}
int64_t ImageFolderDataset::num_classes() const {
  return static_cast<int64_t>(impl_->class_names.size());
}
int ImageFolderDataset::channels() const {
  return impl_->options.channels;
}
const DatasetStats& ImageFolderDataset::stats() const {
  return impl_->stats;
}
const std::vector<std::string>& ImageFolderDataset::class_names() const {
  return impl_->class_names;
}

const std::string& ImageFolderDataset::path(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range(
        fmt::format("ImageFolderDataset::path: index {} outside [0, {})", index, size()));
  }
  return impl_->paths[static_cast<size_t>(index)];
}

std::optional<Sample> ImageFolderDataset::get(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range(
        fmt::format("ImageFolderDataset::get: index {} outside [0, {})", index, size()));
  }
  const auto i = static_cast<size_t>(index);
  auto& corrupt = impl_->corrupt[i];
  if (corrupt.load(std::memory_order_acquire)) return std::nullopt;
  const std::string& path = impl_->paths[i];
  std::string reason;
  cv::Mat image = decode(path, impl_->options.channels, impl_->options.max_image_pixels, &reason);
  if (image.empty()) {
    // Only the thread that flips the state counts and logs: once per file.
    if (!corrupt.exchange(true, std::memory_order_acq_rel)) {
      impl_->stats.record_corrupt(path);
      spdlog::warn("ImageFolderDataset: skipping '{}': {}", path, reason);
    }
    return std::nullopt;
  }
  impl_->stats.record_decoded();
  return Sample{std::move(image), impl_->labels[i], path};
}

}  // namespace saccade::data
