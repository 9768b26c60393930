// A safetensors file (a checkpoint blob, an exported or imported backbone):
// model::parse_safetensors refuses what is malformed with an error, and what it accepts
// serialises back to bytes that parse to the same tensors and metadata.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace saccade::model;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Metadata metadata;
  RawTensorMap tensors;
  try {
    tensors = parse_safetensors(bytes, &metadata);
  } catch (const std::runtime_error&) {
    return 0;
  }
  Metadata again_metadata;
  const RawTensorMap again =
      parse_safetensors(serialize_safetensors(tensors, metadata), &again_metadata);
  if (again.size() != tensors.size() || again_metadata != metadata) std::abort();
  for (const auto& [name, t] : tensors) {
    const auto it = again.find(name);
    if (it == again.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        it->second.data != t.data)
      std::abort();
  }
  return 0;
}
