#include "dataloader/tar_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/file_bytes.h"

namespace saccade::data {
namespace {

constexpr uint64_t kBlock = 512;
constexpr const char* kIndexMagic = "saccade-tar-index 1";

struct File {
  int fd = -1;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void refuse(const std::string& path, uint64_t offset, const std::string& what) {
  throw std::runtime_error(fmt::format("tar '{}' at byte offset {}: {}", path, offset, what));
}

// Reads exactly n bytes at offset (retrying short reads); false on an error or EOF.
bool read_at(int fd, uint64_t offset, void* out, size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

std::string field_text(const unsigned char* field, size_t n) {
  const char* s = reinterpret_cast<const char*>(field);
  return std::string(s, ::strnlen(s, n));
}

// An octal number field (space or NUL padded), or GNU's base-256 for large sizes.
std::optional<uint64_t> parse_number(const unsigned char* field, size_t n) {
  if (field[0] & 0x80) {
    if (field[0] & 0x40) return std::nullopt;  // negative
    uint64_t v = field[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return std::nullopt;
      v = (v << 8) | field[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < n && field[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) v = v * 8 + (field[i] - '0');
  for (; i < n; ++i) {
    if (field[i] != 0 && field[i] != ' ') return std::nullopt;
  }
  return v;
}

// The header checksum counts its own field as spaces; old writers summed signed chars.
bool checksum_ok(const unsigned char* h) {
  const auto stored = parse_number(h + 148, 8);
  if (!stored) return false;
  uint64_t sum_unsigned = 0;
  int64_t sum_signed = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    sum_unsigned += c;
    sum_signed += static_cast<signed char>(c);
  }
  return *stored == sum_unsigned || static_cast<int64_t>(*stored) == sum_signed;
}

bool all_zero(const unsigned char* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The label text of a .cls member as one token, or "?" for anything else (a corrupt
// member the dataset skips), so the index stays one member per line.
std::string label_token(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  text = text.substr(start);
  if (text.empty() || text.size() > 32) return "?";
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == 0) return "?";
  }
  return text;
}

// The "path" and "size" records of a pax extended header ("LEN key=value\n" each, LEN
// counting the whole record). Parsing stops at the first malformed record. LEN is checked
// against what is left rather than added to the offset, so that a huge LEN cannot wrap the
// offset back into the header and loop forever.
// (A plain flag rather than std::optional for size: GCC's -O3 warns falsely on it.)
void parse_pax(std::string_view data, std::optional<std::string>* path, bool* has_size,
               uint64_t* size) {
  while (!data.empty()) {
    const size_t space = data.find(' ');
    if (space == std::string_view::npos || space == 0) return;
    size_t length = 0;
    const auto [end, error] = std::from_chars(data.data(), data.data() + space, length);
    if (error != std::errc() || end != data.data() + space) return;  // digits only
    if (length < space + 2 || length > data.size() || data[length - 1] != '\n') return;
    const std::string_view record = data.substr(space + 1, length - space - 2);
    const size_t eq = record.find('=');
    if (eq != std::string_view::npos) {
      const std::string_view key = record.substr(0, eq);
      const std::string_view value = record.substr(eq + 1);
      if (key == "path") *path = std::string(value);
      if (key == "size") {
        uint64_t parsed = 0;
        const auto [value_end, value_error] =
            std::from_chars(value.data(), value.data() + value.size(), parsed);
        if (value_error == std::errc() && value_end == value.data() + value.size()) {
          *size = parsed;
          *has_size = true;
        }
      }
    }
    data.remove_prefix(length);
  }
}

struct TarStat {
  uint64_t size{};
  int64_t mtime_ns{};
};

std::optional<TarStat> stat_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return TarStat{static_cast<uint64_t>(st.st_size),
                 static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

std::optional<std::vector<TarMember>> read_index(const std::string& index_path,
                                                 const TarStat& tar) {
  std::ifstream in(index_path);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) ||
      line != fmt::format("{} {} {}", kIndexMagic, tar.size, tar.mtime_ns)) {
    return std::nullopt;  // another version, or the tar changed since
  }
  std::vector<TarMember> members;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    TarMember m;
    std::string text;
    if (!(fields >> m.offset >> m.size >> text) || fields.get() != ' ') return std::nullopt;
    std::getline(fields, m.name);
    // (offset + size may wrap around: each is compared with the tar's size on its own.)
    if (m.name.empty() || m.size > tar.size || m.offset > tar.size - m.size) return std::nullopt;
    if (text != "-") m.inline_text = text;
    members.push_back(std::move(m));
  }
  if (!in.eof()) return std::nullopt;
  return members;
}

// Writes the index beside the tar atomically; false (and why) when the folder refuses.
bool write_index(const std::string& index_path, const TarStat& tar,
                 const std::vector<TarMember>& members, std::string* why) {
  std::ostringstream out;
  out << fmt::format("{} {} {}\n", kIndexMagic, tar.size, tar.mtime_ns);
  for (const auto& m : members) {
    out << m.offset << ' ' << m.size << ' ' << (m.inline_text.empty() ? "-" : m.inline_text) << ' '
        << m.name << '\n';
  }
  try {
    write_file_bytes(index_path, out.str());
    return true;
  } catch (const std::runtime_error& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace

std::string tar_index_path(const std::string& path) {
  return path + ".idx";
}

std::vector<TarMember> scan_tar(const std::string& path) {
  File file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) {
    throw std::runtime_error(fmt::format("tar '{}': cannot open: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) {
    throw std::runtime_error(fmt::format("tar '{}': cannot stat: {}", path, std::strerror(errno)));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  std::vector<TarMember> members;
  std::optional<std::string> long_name, pax_path;  // apply to the next entry only
  bool has_pax_size = false;
  uint64_t pax_size = 0;
  unsigned char h[kBlock * 2];  // a header and the first data block (a .cls label)
  uint64_t offset = 0;
  while (true) {
    if (offset == file_size) {
      refuse(path, offset,
             offset == 0 ? "empty file, not a tar"
                         : "ends without the end-of-archive block (cut short?)");
    }
    if (offset + kBlock > file_size) {
      refuse(path, offset, fmt::format("truncated header: only {} bytes left", file_size - offset));
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof h, file_size - offset));
    if (!read_at(file.fd, offset, h, want)) {
      refuse(path, offset, fmt::format("read failed: {}", std::strerror(errno)));
    }
    if (all_zero(h, kBlock)) break;  // end of archive (a second zero block follows)
    if (!checksum_ok(h)) {
      refuse(path, offset,
             offset == 0 ? "not a tar file (header checksum mismatch)"
                         : "corrupt header (checksum mismatch)");
    }
    const auto header_size = parse_number(h + 124, 12);
    if (!header_size) refuse(path, offset, "corrupt header (bad size field)");
    const char type = static_cast<char>(h[156]);
    const bool regular = type == '0' || type == '\0' || type == '7';
    const uint64_t size = regular && has_pax_size ? pax_size : *header_size;
    const uint64_t data = offset + kBlock;
    std::string name;
    if (pax_path) {
      name = *pax_path;
    } else if (long_name) {
      name = *long_name;
    } else {
      name = field_text(h, 100);
      const std::string prefix = field_text(h + 345, 155);
      // Only POSIX ustar has a prefix; old GNU headers keep other fields there.
      if (std::memcmp(h + 257, "ustar\0", 6) == 0 && !prefix.empty()) name = prefix + "/" + name;
    }
    if (size > file_size - data) {
      refuse(path, offset,
             fmt::format("member '{}' promises {} bytes but the file has {} left (truncated)", name,
                         size, file_size - data));
    }
    if (type == 'L' || type == 'x') {
      if (size > (1u << 20)) refuse(path, offset, "extended header over 1 MiB");
      std::string text(size, '\0');
      if (!read_at(file.fd, data, text.data(), text.size())) {
        refuse(path, data, fmt::format("read failed: {}", std::strerror(errno)));
      }
      if (type == 'L') {
        long_name = text.substr(0, ::strnlen(text.c_str(), text.size()));
      } else {
        parse_pax(text, &pax_path, &has_pax_size, &pax_size);
      }
    } else if (type != 'g' && type != 'K') {
      // Names with a newline cannot be kept in the line-based index; no sample has one.
      if (regular && name.find('\n') == std::string::npos) {
        TarMember m{name, data, size, {}};
        if (ends_with(name, ".cls")) {
          m.inline_text =
              size <= kBlock
                  ? label_token(std::string(reinterpret_cast<const char*>(h + kBlock), size))
                  : "?";
        }
        members.push_back(std::move(m));
      }
      long_name.reset();
      pax_path.reset();
      has_pax_size = false;
    }
    offset = data + (size + kBlock - 1) / kBlock * kBlock;
  }
  return members;
}

std::vector<TarMember> load_tar_index(const std::string& path, bool* rebuilt) {
  if (rebuilt) *rebuilt = false;
  const auto tar = stat_file(path);
  if (!tar) {
    throw std::runtime_error(fmt::format("tar '{}': cannot stat: {}", path, std::strerror(errno)));
  }
  const std::string index_path = tar_index_path(path);
  if (auto members = read_index(index_path, *tar)) return *members;
  auto members = scan_tar(path);
  if (rebuilt) *rebuilt = true;
  std::string why;
  if (!write_index(index_path, *tar, members, &why)) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::warn("{}: tar indexes are kept in memory only", why);
    }
  }
  return members;
}

}  // namespace saccade::data
