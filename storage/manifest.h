// The manifest of one checkpoint: its blobs (name, size, CRC-32) and metadata,
// in a small self-checking binary encoding. Internal to storage/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "storage/checkpoint_store.h"

namespace saccade::storage {

// Layout (little endian): "SCKM" u32 version=1, i64 step, u32 n_blobs,
// n x {u32 len, name, u64 size, u32 crc}, u32 n_meta, n x {u32 len, key,
// u32 len, value}, u32 crc32 of everything before it.
std::string encode_manifest(const CheckpointInfo& info);
// Throws std::runtime_error naming `what` when the bytes are not a manifest.
CheckpointInfo decode_manifest(std::string_view bytes, const std::string& what);

}  // namespace saccade::storage
