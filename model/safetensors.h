// The safetensors byte format (github.com/huggingface/safetensors), without
// torch: an 8-byte little-endian u64 header length N, N bytes of JSON
// {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}}
// padded with spaces to a multiple of 8, then the raw little-endian data with
// offsets relative to its start. The same bytes serve checkpoints and the
// backbone export that PyTorch users open with safetensors.torch.load_file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace saccade::model {

enum class DType { kBool, kU8, kI8, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

const char* dtype_name(DType dtype);           // "F32", "BF16", ... as in the header
int64_t dtype_size(DType dtype);               // bytes per element
DType dtype_from_name(std::string_view name);  // throws std::invalid_argument on unknown names

// One tensor as bytes: row-major, little-endian, data.size() == numel * dtype_size.
struct RawTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string data;
  int64_t numel() const;
};

using RawTensorMap = std::map<std::string, RawTensor>;  // ordered by name
using Metadata = std::map<std::string, std::string>;    // the header's __metadata__

// Throws std::invalid_argument when a tensor's data size disagrees with its
// dtype and shape, or a name is empty or "__metadata__".
std::string serialize_safetensors(const RawTensorMap& tensors, const Metadata& metadata = {});

// Validates everything before use and throws std::runtime_error naming the
// problem: short input, header length past the end or over 100 MB, malformed
// JSON, unknown dtype or field, negative or overflowing shape, data_offsets out
// of range, overlapping, leaving holes, or disagreeing with dtype x shape,
// duplicate names. `metadata` (optional) receives __metadata__.
RawTensorMap parse_safetensors(std::string_view bytes, Metadata* metadata = nullptr);

}  // namespace saccade::model
