// Well-formed envelopes whose fields hold odd values, for the runtime's processes: every
// field of the chosen body (nested structs and lists too, through Cap'n Proto's dynamic
// API, so a field added to schemas/messages.capnp is covered without a change here) at
// its extremes (0, -1, min, max, NaN, infinities), texts empty, long, not UTF-8 or
// path-like, lists empty or long, enums past their last value. The garbage tests stop at
// wire::open_frame; these frames pass it and reach the handlers.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "schemas/wire.h"

namespace saccade::testing {

class OddEnvelopes {
 public:
  // Envelopes that claim to be from `as` (job, role, rank, node) with process id `pid`,
  // except one in eight whose header is odd too.
  OddEnvelopes(uint64_t seed, wire::SenderInfo as, uint32_t pid);
  // One envelope of a body kind drawn at random, none of `except`, of generation
  // `generation` (when the header holds).
  zmq::message_t make(uint64_t generation, const std::vector<wire::Envelope::Body::Which>& except);

 private:
  wire::SenderInfo as_;
  uint32_t pid_;
  std::mt19937_64 rng_;
};

}  // namespace saccade::testing
