// Internal to saccade_safetensors: the JSON of the safetensors header, through
// nlohmann-json; the input is untrusted, so every field is checked by name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/safetensors.h"

namespace saccade::model::detail {

using HeaderEntry = std::pair<std::string, std::pair<uint64_t, uint64_t>>;  // name, data_offsets

// Throws std::runtime_error("safetensors: " + what).
[[noreturn]] void fail(const std::string& what);

// Parses the header object: `tensors` gets dtype and shape of each entry (data
// empty), `offsets` its data_offsets, `metadata` (optional) the __metadata__.
void read_safetensors_header(std::string_view json, RawTensorMap& tensors,
                             std::vector<HeaderEntry>& offsets, Metadata* metadata);

}  // namespace saccade::model::detail
