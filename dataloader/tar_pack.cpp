#include "dataloader/tar_pack.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "dataloader/image_folder_dataset.h"
#include "dataloader/tar_index.h"

namespace saccade::data {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kRecord = 10240;  // GNU tar's default record: 20 blocks

void put_octal(char* field, size_t width, uint64_t value) {
  // width - 1 digits and a NUL, as ustar wants.
  const std::string digits = fmt::format("{:0{}o}", value, width - 1);
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

// One ustar header of a regular file (mode 0644, owner 0, mtime 0 so that packing
// the same folder twice gives the same bytes).
std::array<char, kBlock> ustar_header(const std::string& name, uint64_t size) {
  std::array<char, kBlock> h{};
  std::memcpy(h.data(), name.data(), name.size());
  put_octal(h.data() + 100, 8, 0644);
  put_octal(h.data() + 108, 8, 0);
  put_octal(h.data() + 116, 8, 0);
  put_octal(h.data() + 124, 12, size);
  put_octal(h.data() + 136, 12, 0);
  std::memset(h.data() + 148, ' ', 8);
  h[156] = '0';
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  put_octal(h.data() + 329, 8, 0);
  put_octal(h.data() + 337, 8, 0);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  const std::string checksum = fmt::format("{:06o}", sum);
  std::memcpy(h.data() + 148, checksum.data(), 6);
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

class TarWriter {
 public:
  explicit TarWriter(std::string path) : path_(std::move(path)), out_(path_, std::ios::binary) {
    if (!out_) throw std::runtime_error(fmt::format("pack: cannot create '{}'", path_));
  }
  void add(const std::string& name, const std::string& bytes) {
    const auto header = ustar_header(name, bytes.size());
    out_.write(header.data(), header.size());
    out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    pad((bytes.size() + kBlock - 1) / kBlock * kBlock - bytes.size());
    written_ += kBlock + (bytes.size() + kBlock - 1) / kBlock * kBlock;
  }
  // Two zero blocks end the archive; the file is padded to a whole record.
  uint64_t finish() {
    uint64_t end = written_ + 2 * kBlock;
    end = (end + kRecord - 1) / kRecord * kRecord;
    pad(end - written_);
    out_.flush();
    if (!out_) throw std::runtime_error(fmt::format("pack: cannot write '{}'", path_));
    out_.close();
    return end;
  }

 private:
  void pad(uint64_t n) {
    static const std::array<char, kBlock> zeros{};
    for (; n > 0; n -= std::min<uint64_t>(n, kBlock)) {
      out_.write(zeros.data(), static_cast<std::streamsize>(std::min<uint64_t>(n, kBlock)));
    }
  }
  std::string path_;
  std::ofstream out_;
  uint64_t written_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("pack: cannot read '{}'", path));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string lower_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

PackResult pack_image_folder(const PackOptions& options) {
  if (options.shard_size < 1) {
    throw std::invalid_argument(
        fmt::format("pack: --shard-size must be at least 1, got {}", options.shard_size));
  }
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("pack: --prefix must be a non-empty file name, got '{}'", options.prefix));
  }
  const ImageFolderListing listing = list_image_folder(options.folder);
  fs::create_directories(options.out);
  for (const auto& entry : fs::directory_iterator(options.out)) {
    if (entry.path().extension() == ".tar") {
      throw std::invalid_argument(
          fmt::format("pack: '{}' already holds shards ({}); pack into an empty folder",
                      options.out, entry.path().filename().string()));
    }
  }
  PackResult result;
  const auto n = static_cast<int64_t>(listing.paths.size());
  for (int64_t first = 0; first < n; first += options.shard_size) {
    const std::string path =
        (fs::path(options.out) / fmt::format("{}-{:06d}.tar", options.prefix, result.shards.size()))
            .string();
    const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
    TarWriter writer(temp);
    for (int64_t i = first; i < std::min(n, first + options.shard_size); ++i) {
      const auto u = static_cast<size_t>(i);
      const std::string key = fmt::format("{:09d}", i);
      writer.add(key + lower_extension(listing.paths[u]), read_file(listing.paths[u]));
      writer.add(key + ".cls", std::to_string(listing.labels[u]));
    }
    result.bytes += writer.finish();
    fs::rename(temp, path);
    load_tar_index(path);  // builds TAR.idx now (and checks what was written)
    result.shards.push_back(path);
  }
  result.samples = n;
  std::ofstream classes(fs::path(options.out) / "classes.txt", std::ios::trunc);
  for (const auto& name : listing.class_names) classes << name << '\n';
  if (!classes.flush()) {
    throw std::runtime_error(fmt::format("pack: cannot write '{}/classes.txt'", options.out));
  }
  return result;
}

}  // namespace saccade::data
