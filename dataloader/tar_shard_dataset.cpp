#include "dataloader/tar_shard_dataset.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include "dataloader/image_decode.h"
#include "dataloader/tar_index.h"

namespace saccade::data {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBadLabel = -2;  // a .cls that holds no label in range: skipped at get()

std::string lower_extension(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = name.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool is_image(const std::string& ext) {
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp" || ext == ".webp";
}

int64_t parse_label(const std::string& text) {
  int64_t label = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, label);
  return (ec == std::errc() && ptr == end && label >= 0) ? label : kBadLabel;
}

// classes.txt beside the shards, one name a line; empty when there is none.
std::vector<std::string> read_class_names(const std::string& first_shard) {
  std::vector<std::string> names;
  std::ifstream in(fs::path(first_shard).parent_path() / "classes.txt");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  return names;
}

struct Entry {
  uint32_t shard{};
  uint64_t offset{};
  uint64_t size{};
  int64_t label = -1;
  std::string member;  // the image member's name, for messages
};

}  // namespace

std::vector<std::string> resolve_tar_shards(const std::string& shards) {
  if (shards.empty()) throw std::invalid_argument("TarShardDataset: no shards given");
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(shards, ec)) {
    for (const auto& entry : fs::directory_iterator(shards)) {
      if (entry.is_regular_file() && entry.path().extension() == ".tar") {
        paths.push_back(entry.path().string());
      }
    }
  } else {
    glob_t found{};
    if (::glob(shards.c_str(), 0, nullptr, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
    }
    ::globfree(&found);
  }
  if (paths.empty()) {
    throw std::invalid_argument(fmt::format(
        "TarShardDataset: '{}' names no tar file (a folder of .tar files, a .tar or a glob)",
        shards));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

struct TarShardDataset::Impl {
  TarShardOptions options;
  std::vector<std::string> paths;
  std::vector<int> fds;
  std::vector<std::string> class_names;
  int64_t num_classes = 0;
  std::vector<Entry> entries;
  std::unique_ptr<std::atomic<bool>[]> corrupt;  // per sample: never decoded again once set
  int64_t without_image = 0;
  DatasetStats stats;

  ~Impl() {
    for (int fd : fds) ::close(fd);
  }

  // The samples of one shard in tar order, grouped by KEY.
  void add_shard(uint32_t shard, const std::vector<TarMember>& members) {
    struct Group {
      const TarMember* image = nullptr;
      const TarMember* cls = nullptr;
    };
    std::vector<Group> groups;
    std::unordered_map<std::string, size_t> by_key;
    for (const auto& m : members) {
      const std::string ext = lower_extension(m.name);
      if (!is_image(ext) && ext != ".cls") continue;  // other fields of a sample
      const std::string key = m.name.substr(0, m.name.size() - ext.size());
      const auto [it, fresh] = by_key.emplace(key, groups.size());
      if (fresh) groups.emplace_back();
      Group& g = groups[it->second];
      if (ext == ".cls") {
        if (!g.cls) g.cls = &m;
      } else if (!g.image) {
        g.image = &m;
      }
    }
    for (const Group& g : groups) {
      if (!g.image) {
        ++without_image;
        continue;
      }
      const int64_t label = g.cls ? parse_label(g.cls->inline_text) : -1;
      entries.push_back(Entry{shard, g.image->offset, g.image->size, label, g.image->name});
    }
  }

  void fail(size_t i, const std::string& reason) {
    // Only the thread that flips the state counts and logs: once per sample.
    if (!corrupt[i].exchange(true, std::memory_order_acq_rel)) {
      const std::string source = source_of(i);
      stats.record_corrupt(source);
      spdlog::warn("TarShardDataset: skipping '{}': {}", source, reason);
    }
  }

  std::string source_of(size_t i) const {
    return paths[entries[i].shard] + ":" + entries[i].member;
  }
};

TarShardDataset::TarShardDataset(TarShardOptions options) : impl_(std::make_unique<Impl>()) {
  if (!SACCADE_HAS_IMAGE_CODECS) {
    // JPEGs decode through TurboJPEG in every build; other formats need imgcodecs.
    spdlog::info(
        "TarShardDataset ('{}'): this build decodes JPEGs only (SACCADE_IMAGE_CODECS=OFF): other "
        "image files are skipped and counted as undecodable",
        options.shards);
  }
  if (options.channels != 1 && options.channels != 3) {
    throw std::invalid_argument(
        fmt::format("TarShardDataset: channels must be 1 or 3, got {} (shards '{}')",
                    options.channels, options.shards));
  }
  auto& impl = *impl_;
  impl.paths = resolve_tar_shards(options.shards);
  if (impl.paths.size() > UINT32_MAX)
    throw std::invalid_argument("TarShardDataset: too many shards");
  for (size_t s = 0; s < impl.paths.size(); ++s) {
    const std::string& path = impl.paths[s];
    impl.add_shard(static_cast<uint32_t>(s), load_tar_index(path));
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw std::runtime_error(
          fmt::format("TarShardDataset: cannot open '{}': {}", path, std::strerror(errno)));
    }
    impl.fds.push_back(fd);
  }
  if (impl.entries.empty()) {
    throw std::invalid_argument(
        fmt::format("TarShardDataset: the {} shard(s) of '{}' hold no image member "
                    "(.jpg/.jpeg/.png/.bmp/.webp)",
                    impl.paths.size(), options.shards));
  }
  if (impl.without_image > 0) {
    spdlog::warn("TarShardDataset: {} sample key(s) of '{}' have no image member and are left out",
                 impl.without_image, options.shards);
  }
  impl.class_names = read_class_names(impl.paths.front());
  int64_t max_label = -1;
  for (const auto& e : impl.entries) max_label = std::max(max_label, e.label);
  impl.num_classes =
      impl.class_names.empty() ? max_label + 1 : static_cast<int64_t>(impl.class_names.size());
  for (auto& e : impl.entries) {
    if (e.label >= impl.num_classes) e.label = kBadLabel;
  }
  impl.corrupt = std::make_unique<std::atomic<bool>[]>(impl.entries.size());
  for (size_t i = 0; i < impl.entries.size(); ++i) impl.corrupt[i].store(false);
  impl.options = std::move(options);
}

TarShardDataset::~TarShardDataset() = default;

int64_t TarShardDataset::size() const {
  return static_cast<int64_t>(impl_->entries.size());
}
int64_t TarShardDataset::num_classes() const {
  return impl_->num_classes;
}
int TarShardDataset::channels() const {
  return impl_->options.channels;
}
const DatasetStats& TarShardDataset::stats() const {
  return impl_->stats;
}
const std::vector<std::string>& TarShardDataset::shard_paths() const {
  return impl_->paths;
}
const std::vector<std::string>& TarShardDataset::class_names() const {
  return impl_->class_names;
}
int64_t TarShardDataset::skipped_without_image() const {
  return impl_->without_image;
}

std::string TarShardDataset::source(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range(
        fmt::format("TarShardDataset::source: index {} outside [0, {})", index, size()));
  }
  return impl_->source_of(static_cast<size_t>(index));
}

std::optional<Sample> TarShardDataset::get(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range(
        fmt::format("TarShardDataset::get: index {} outside [0, {})", index, size()));
  }
  const auto i = static_cast<size_t>(index);
  if (impl_->corrupt[i].load(std::memory_order_acquire)) return std::nullopt;
  const Entry& e = impl_->entries[i];
  if (e.label == kBadLabel) {
    impl_->fail(i,
                fmt::format("its .cls member holds no class index in [0, {})", impl_->num_classes));
    return std::nullopt;
  }
  std::vector<unsigned char> bytes(e.size);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(impl_->fds[e.shard], bytes.data() + done, bytes.size() - done,
                                static_cast<off_t>(e.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      impl_->fail(i, got < 0 ? fmt::format("read failed: {}", std::strerror(errno))
                             : std::string("the shard is shorter than its index says"));
      return std::nullopt;
    }
    done += static_cast<size_t>(got);
  }
  std::string why;
  cv::Mat image = decode_image(bytes.data(), bytes.size(), impl_->options.channels,
                               impl_->options.max_image_pixels, &why);
  if (image.empty()) {
    impl_->fail(i, why);
    return std::nullopt;
  }
  impl_->stats.record_decoded();
  return Sample{std::move(image), e.label, impl_->source_of(i)};
}

}  // namespace saccade::data
