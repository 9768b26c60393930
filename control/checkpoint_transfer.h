// Checkpoints on the wire: a set of named blobs cut into CheckpointChunk
// messages and put back together on the other side. Learner 0 streams its
// checkpoints to the coordinator this way, and the coordinator streams them
// back to a learner that resumes. Torch-free: bytes only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/wire.h"
#include "storage/checkpoint_store.h"

namespace saccade::control {

using Blobs = std::map<std::string, std::string>;

// Bytes of blob data per chunk, so that a chunk and its envelope stay well
// under cluster.max_message_bytes (receivers drop larger frames unread).
size_t checkpoint_chunk_bytes(int64_t max_message_bytes);

// One chunk: `data` is a view into the blob; `checksum` is the CRC-32 of the
// whole blob, carried on its last chunk (0 on the others).
struct ChunkView {
  std::string_view name;
  uint32_t index = 0;
  uint32_t count = 0;
  std::string_view data;
  uint64_t checksum = 0;
};

// Calls `emit` for every chunk of every blob, blob by blob in name order.
// An empty blob is one empty chunk. `digests` (digest_blobs(blobs)), when given,
// saves computing every blob's CRC-32 again.
void for_each_chunk(const Blobs& blobs, size_t chunk_bytes,
                    const std::function<void(const ChunkView&)>& emit,
                    const std::vector<storage::BlobInfo>* digests = nullptr);

// Name, size and CRC-32 of every blob, in name order (what a store's manifest keeps).
std::vector<storage::BlobInfo> digest_blobs(const Blobs& blobs);
// A CheckpointManifest: the first message of an upload (see messages.capnp).
void write_manifest(int64_t step, const std::vector<storage::BlobInfo>& digests,
                    wire::CheckpointManifest::Builder out);
// Whether `manifest` names exactly the blobs of `stored` (a store's manifest).
bool same_blobs(wire::CheckpointManifest::Reader manifest,
                const std::vector<storage::BlobInfo>& stored);

// What an actor asks the coordinator for (a CheckpointRequest).
struct CheckpointQuery {
  int64_t step = -1;               // -1: the newest
  std::vector<std::string> blobs;  // only these (files, for kInputFile); empty: every blob
  wire::CheckpointSource source = wire::CheckpointSource::JOB;
};
void write_query(const CheckpointQuery& query, wire::CheckpointRequest::Builder out);
CheckpointQuery read_query(wire::CheckpointRequest::Reader in);
// "checkpoint 7 (blobs teacher) of the stage's input": for log lines and errors.
std::string describe(const CheckpointQuery& query);

// Fills a CheckpointChunk message body.
void write_chunk(int64_t step, const ChunkView& chunk, wire::CheckpointChunk::Builder out);

// A committed checkpoint on its way to one learner, sent as fast as that
// learner's socket takes it: the sender calls next() for the message to send
// and advance() once the socket took it. The blobs are shared by every
// learner loading the same step (one copy in memory however many resume).
class CheckpointDownload {
 public:
  CheckpointDownload(int64_t step, std::shared_ptr<const Blobs> blobs, size_t chunk_bytes);

  int64_t step() const { return step_; }
  const std::shared_ptr<const Blobs>& blobs() const { return blobs_; }
  uint64_t bytes() const { return bytes_; }
  size_t chunks() const { return chunks_.size(); }
  // Chunks first, then CheckpointCommitted{step, bytes}.
  bool done() const { return next_ > chunks_.size(); }
  void next(wire::Envelope::Body::Builder out) const;
  void advance() { ++next_; }

 private:
  int64_t step_;
  std::shared_ptr<const Blobs> blobs_;  // shared; chunks_ point into it
  std::vector<ChunkView> chunks_;
  uint64_t bytes_ = 0;
  size_t next_ = 0;
};

// Puts one checkpoint's chunks back together, refusing anything out of order
// or corrupt. Chunks of another step reset it (a newer checkpoint replaced
// an unfinished one); the first chunk of a blob already begun restarts that
// blob (the sender sent the checkpoint again, e.g. to a restarted coordinator).
class CheckpointAssembler {
 public:
  // Returns "" when the chunk was taken, else why it was refused.
  std::string add(wire::CheckpointChunk::Reader chunk, uint64_t max_total_bytes);
  // Every blob that started has all its chunks and a matching checksum, and
  // they add up to `expected_bytes` (CheckpointCommitted.bytes: a blob whose
  // every chunk was lost would otherwise go unnoticed).
  bool complete(uint64_t expected_bytes) const;
  int64_t step() const { return step_; }
  uint64_t bytes() const { return bytes_; }
  // Hands the blobs over and resets.
  Blobs take();
  void reset();

 private:
  int64_t step_ = -1;
  uint64_t bytes_ = 0;
  Blobs blobs_;
  std::map<std::string, uint32_t> next_index_;  // per blob: the chunk expected next
  std::map<std::string, uint32_t> count_;       // per blob: its chunk count
};

}  // namespace saccade::control
