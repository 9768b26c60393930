// Internal to saccade_safetensors: the JSON of the safetensors header, read and
// written by hand (the grammar is small and the input untrusted).
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

// Appends `s` as a JSON string literal (quotes, backslashes and control characters escaped).
void append_json_string(std::string& out, std::string_view s);

// Parses the header object: `tensors` gets dtype and shape of each entry (data
// empty), `offsets` its data_offsets, `metadata` (optional) the __metadata__.
void read_safetensors_header(std::string_view json, RawTensorMap& tensors,
                             std::vector<HeaderEntry>& offsets, Metadata* metadata);

}  // namespace saccade::model::detail
