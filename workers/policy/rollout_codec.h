// Traces as wire::RolloutGroup messages (one per image) and back, the format
// rollout actors answer in and the RolloutStore keeps. The receiver trusts
// nothing: every tensor's name, dtype, shape and size is checked against the
// shape it expects before a byte is copied, and a bad group is refused with a
// reason naming the tensor, never a crash.
//
// Tensors of the group of image b (G traces, little-endian, row-major):
//   "states"   float32 [T, G, S, D]   the state the policy read before glimpse t
//   "extent"   float32 [2]            (W, H) / min(W, H)
//   "gazes"    float32 [T, G, 2]
//   "logProb"  float32 [T, G]
//   "rewards"  float32 [T, G]
//   "correct"  uint8   [T, G]
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schemas/messages.capnp.h"
#include "workers/policy/gaze_traces.h"

namespace saccade::policy {

// What a group must look like: T glimpses, G traces, S state tokens of width D.
struct RolloutShape {
  int64_t steps = 0, group = 0, n_state = 0, width = 0;
};

// Bytes of the tensor data of one image's group (frame sizing).
size_t rollout_group_bytes(const RolloutShape& shape);

// The traces of image `image` of `traces` (rows image * G .. image * G + G - 1).
void write_rollout_group(const Traces& traces, int64_t image, int64_t group,
                         wire::RolloutGroup::Builder out);

// The traces of one image (N = G), or nullopt with `why` set when `in` is not
// exactly a group of `shape`.
std::optional<Traces> read_rollout_group(wire::RolloutGroup::Reader in, const RolloutShape& shape,
                                         std::string& why);

// Traces of consecutive images concatenated image-major (the inverse of
// splitting a batch by image). Throws std::invalid_argument for an empty list.
Traces concat_traces(const std::vector<Traces>& parts);

// A standalone Cap'n Proto message holding one RolloutGroup (what the
// RolloutStore keeps), and back; decode returns nullopt with `why` on bad bytes.
std::string encode_rollout_group(const Traces& traces, int64_t image, int64_t group,
                                 uint64_t policy_version, uint64_t image_id);
std::optional<Traces> decode_rollout_group(const std::string& bytes, const RolloutShape& shape,
                                           std::string& why);

}  // namespace saccade::policy
