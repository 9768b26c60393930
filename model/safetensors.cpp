#include "model/safetensors.h"

#include "model/safetensors_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace saccade::model {
namespace {

using detail::fail;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps");

constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit

struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},   {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},   {DType::kU16, "U16", 2}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI32, "I32", 4}, {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},   {DType::kI64, "I64", 8}, {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d;
  throw std::invalid_argument("dtype: not a safetensors dtype");
}

// numel * element size, or -1 on overflow / negative dimensions.
int64_t byte_size(const std::vector<int64_t>& shape, int64_t element_size) {
  int64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

const char* dtype_name(DType dtype) {
  return info(dtype).name;
}
int64_t dtype_size(DType dtype) {
  return info(dtype).size;
}

DType dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  throw std::invalid_argument("dtype: unknown safetensors dtype \"" + std::string(name) + "\"");
}

int64_t RawTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string serialize_safetensors(const RawTensorMap& tensors, const Metadata& metadata) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!metadata.empty()) json["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw std::invalid_argument("tensors: invalid tensor name \"" + name + "\"");
    const int64_t expected = byte_size(t.shape, dtype_size(t.dtype));
    if (expected < 0 || static_cast<uint64_t>(expected) != t.data.size())
      throw std::invalid_argument("tensors[\"" + name + "\"]: data holds " +
                                  std::to_string(t.data.size()) + " bytes, dtype x shape needs " +
                                  std::to_string(expected));
    json[name] = {{"dtype", dtype_name(t.dtype)},
                  {"shape", t.shape},
                  {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string header = json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  header.append((8 - header.size() % 8) % 8, ' ');  // align the data to 8 bytes
  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  char len[8];
  std::memcpy(len, &n, 8);  // little-endian host (static_assert above)
  out.append(len, 8);
  out += header;
  for (const auto& [name, t] : tensors) out += t.data;
  return out;
}

RawTensorMap parse_safetensors(std::string_view bytes, Metadata* metadata) {
  if (bytes.size() < 8)
    fail("input of " + std::to_string(bytes.size()) +
         " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeader) fail("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > bytes.size() - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the " +
         std::to_string(bytes.size()) + "-byte input");
  RawTensorMap tensors;
  std::vector<detail::HeaderEntry> offsets;
  if (metadata) metadata->clear();
  detail::read_safetensors_header(bytes.substr(8, n), tensors, offsets, metadata);

  const std::string_view data = bytes.substr(8 + n);
  std::sort(offsets.begin(), offsets.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  uint64_t expected_begin = 0;
  for (const auto& [name, range] : offsets) {
    const auto [begin, end] = range;
    if (begin > end) fail("tensor \"" + name + "\": data_offsets begin > end");
    if (end > data.size())
      fail("tensor \"" + name + "\": data_offsets [" + std::to_string(begin) + ", " +
           std::to_string(end) + "] out of range of " + std::to_string(data.size()) +
           " data bytes");
    if (begin < expected_begin)
      fail("tensor \"" + name + "\": data_offsets overlap another tensor");
    if (begin > expected_begin)
      fail("tensor \"" + name + "\": data_offsets leave a hole before it");
    RawTensor& t = tensors.at(name);
    const int64_t size = byte_size(t.shape, dtype_size(t.dtype));
    if (size < 0 || static_cast<uint64_t>(size) != end - begin)
      fail("tensor \"" + name + "\": data_offsets span " + std::to_string(end - begin) +
           " bytes but dtype x shape needs " + std::to_string(size));
    t.data.assign(data.substr(begin, end - begin));
    expected_begin = end;
  }
  if (expected_begin != data.size())
    fail(std::to_string(data.size() - expected_begin) +
         " data bytes are not covered by any tensor");
  return tensors;
}

}  // namespace saccade::model
