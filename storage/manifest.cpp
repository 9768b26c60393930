#include "storage/manifest.h"

#include <zlib.h>

#include <cstring>
#include <stdexcept>

namespace saccade::storage {
namespace {

constexpr char kMagic[4] = {'S', 'C', 'K', 'M'};
constexpr uint32_t kVersion = 1;

template <class T>
void put_int(std::string& out, T value) {
  char buf[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) buf[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  out.append(buf, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  if (s.size() > UINT32_MAX) throw std::invalid_argument("manifest string longer than 4 GiB");
  put_int<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out += s;
}

// Bounds-checked reader over the manifest bytes.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}

  template <class T>
  T get_int() {
    need(sizeof(T));
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      value |= static_cast<T>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return value;
  }
  std::string get_string() {
    const uint32_t n = get_int<uint32_t>();
    need(n);
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  void need(size_t n) const {
    if (bytes_.size() - pos_ < n) fail("truncated");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(what_ + ": malformed manifest (" + why + ")");
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view bytes_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

uint32_t crc32_of(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string encode_manifest(const CheckpointInfo& info) {
  std::string out(kMagic, sizeof kMagic);
  put_int<uint32_t>(out, kVersion);
  put_int<uint64_t>(out, static_cast<uint64_t>(info.step));
  put_int<uint32_t>(out, static_cast<uint32_t>(info.blobs.size()));
  for (const BlobInfo& b : info.blobs) {
    put_string(out, b.name);
    put_int<uint64_t>(out, b.size);
    put_int<uint32_t>(out, b.crc32);
  }
  put_int<uint32_t>(out, static_cast<uint32_t>(info.meta.size()));
  for (const auto& [key, value] : info.meta) {
    put_string(out, key);
    put_string(out, value);
  }
  put_int<uint32_t>(out, crc32_of(out));
  return out;
}

CheckpointInfo decode_manifest(std::string_view bytes, const std::string& what) {
  Reader r(bytes, what);
  r.need(sizeof kMagic);
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) r.fail("bad magic");
  if (bytes.size() < 8) r.fail("truncated");
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  Reader tail(bytes.substr(bytes.size() - 4), what);
  if (tail.get_int<uint32_t>() != crc32_of(body)) r.fail("checksum mismatch");
  r.get_int<uint32_t>();  // skip the magic (4 bytes read as one word)
  if (const uint32_t version = r.get_int<uint32_t>(); version != kVersion)
    r.fail("unknown version " + std::to_string(version));
  CheckpointInfo info;
  info.step = static_cast<int64_t>(r.get_int<uint64_t>());
  const uint32_t n_blobs = r.get_int<uint32_t>();
  for (uint32_t i = 0; i < n_blobs; ++i) {
    BlobInfo b;
    b.name = r.get_string();
    b.size = r.get_int<uint64_t>();
    b.crc32 = r.get_int<uint32_t>();
    info.blobs.push_back(std::move(b));
  }
  const uint32_t n_meta = r.get_int<uint32_t>();
  for (uint32_t i = 0; i < n_meta; ++i) {
    std::string key = r.get_string();
    info.meta[key] = r.get_string();
  }
  if (r.pos() != body.size()) r.fail("trailing bytes");
  return info;
}

}  // namespace saccade::storage
