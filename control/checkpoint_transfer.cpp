#include "control/checkpoint_transfer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "storage/checkpoint_store.h"

namespace saccade::control {

size_t checkpoint_chunk_bytes(int64_t max_message_bytes) {
  const int64_t half = std::max<int64_t>(max_message_bytes / 2, 64);
  return static_cast<size_t>(std::min<int64_t>(half, int64_t{4} << 20));
}

void for_each_chunk(const Blobs& blobs, size_t chunk_bytes,
                    const std::function<void(const ChunkView&)>& emit,
                    const std::vector<storage::BlobInfo>* digests) {
  size_t blob = 0;
  for (const auto& [name, bytes] : blobs) {
    const size_t count = std::max<size_t>(1, (bytes.size() + chunk_bytes - 1) / chunk_bytes);
    const uint64_t crc = digests ? (*digests)[blob++].crc32 : storage::crc32_of(bytes);
    for (size_t i = 0; i < count; ++i) {
      const size_t begin = i * chunk_bytes;
      ChunkView c;
      c.name = name;
      c.index = static_cast<uint32_t>(i);
      c.count = static_cast<uint32_t>(count);
      c.data = std::string_view(bytes).substr(std::min(begin, bytes.size()), chunk_bytes);
      c.checksum = i + 1 == count ? crc : 0;
      emit(c);
    }
  }
}

std::vector<storage::BlobInfo> digest_blobs(const Blobs& blobs) {
  std::vector<storage::BlobInfo> out;
  out.reserve(blobs.size());
  for (const auto& [name, bytes] : blobs)
    out.push_back({name, bytes.size(), storage::crc32_of(bytes)});
  return out;
}

void write_manifest(int64_t step, const std::vector<storage::BlobInfo>& digests,
                    wire::CheckpointManifest::Builder out) {
  out.setStep(step);
  auto blobs = out.initBlobs(static_cast<unsigned>(digests.size()));
  for (unsigned i = 0; i < digests.size(); ++i) {
    blobs[i].setName(digests[i].name);
    blobs[i].setSize(digests[i].size);
    blobs[i].setCrc32(digests[i].crc32);
  }
}

bool same_blobs(wire::CheckpointManifest::Reader manifest,
                const std::vector<storage::BlobInfo>& stored) {
  const auto blobs = manifest.getBlobs();
  if (blobs.size() != stored.size()) return false;
  for (unsigned i = 0; i < blobs.size(); ++i)
    if (blobs[i].getName().cStr() != stored[i].name || blobs[i].getSize() != stored[i].size ||
        blobs[i].getCrc32() != stored[i].crc32)
      return false;
  return true;
}

void write_query(const CheckpointQuery& query, wire::CheckpointRequest::Builder out) {
  out.setStep(query.step);
  out.setSource(query.source);
  auto blobs = out.initBlobs(static_cast<unsigned>(query.blobs.size()));
  for (unsigned i = 0; i < query.blobs.size(); ++i) blobs.set(i, query.blobs[i]);
}

CheckpointQuery read_query(wire::CheckpointRequest::Reader in) {
  CheckpointQuery q;
  q.step = in.getStep();
  q.source = in.getSource();
  for (auto name : in.getBlobs()) q.blobs.emplace_back(name.cStr());
  return q;
}

std::string describe(const CheckpointQuery& query) {
  // The names come from a peer: at most kShown of them, each cut to kLength bytes, so
  // that a request of thousands of long names still makes one readable log line.
  constexpr size_t kShown = 4, kLength = 64;
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min(query.blobs.size(), kShown); ++i) {
    const std::string& name = query.blobs[i];
    shown.push_back(name.size() > kLength ? name.substr(0, kLength) + "..." : name);
  }
  const std::string more =
      query.blobs.size() > kShown ? fmt::format(" and {} more", query.blobs.size() - kShown) : "";
  const std::string names =
      shown.empty() ? "" : fmt::format(" ({}{})", fmt::join(shown, ", "), more);
  switch (query.source) {
    case wire::CheckpointSource::INPUT_FILE:
      return fmt::format("input file(s){}", names);
    case wire::CheckpointSource::INPUT_CHECKPOINT:
      return fmt::format("checkpoint {}{} of the stage's input",
                         query.step < 0 ? "newest" : std::to_string(query.step), names);
    default:
      return fmt::format("checkpoint {}{}", query.step < 0 ? "newest" : std::to_string(query.step),
                         names);
  }
}

void write_chunk(int64_t step, const ChunkView& chunk, wire::CheckpointChunk::Builder out) {
  out.setStep(step);
  out.setIndex(chunk.index);
  out.setCount(chunk.count);
  out.setName(std::string(chunk.name));
  out.setData(
      kj::arrayPtr(reinterpret_cast<const kj::byte*>(chunk.data.data()), chunk.data.size()));
  out.setChecksum(chunk.checksum);
}

CheckpointDownload::CheckpointDownload(int64_t step, std::shared_ptr<const Blobs> blobs,
                                       size_t chunk_bytes)
    : step_(step), blobs_(std::move(blobs)) {
  for_each_chunk(*blobs_, chunk_bytes, [&](const ChunkView& c) {
    bytes_ += c.data.size();
    chunks_.push_back(c);
  });
}

void CheckpointDownload::next(wire::Envelope::Body::Builder out) const {
  if (next_ < chunks_.size()) return write_chunk(step_, chunks_[next_], out.initCheckpointChunk());
  auto c = out.initCheckpointCommitted();
  c.setStep(step_);
  c.setBytes(bytes_);
}

std::string CheckpointAssembler::add(wire::CheckpointChunk::Reader chunk,
                                     uint64_t max_total_bytes) {
  if (chunk.getStep() < 0) return "checkpoint chunk of a negative step";
  if (chunk.getStep() != step_) {
    reset();
    step_ = chunk.getStep();
  }
  const std::string name = chunk.getName();
  if (name.empty()) return "checkpoint chunk without a blob name";
  const uint32_t count = chunk.getCount();
  if (count == 0 || chunk.getIndex() >= count)
    return fmt::format("checkpoint chunk {} of {} of blob '{}'", chunk.getIndex(), count, name);
  auto [expected, fresh] = next_index_.try_emplace(name, 0);
  if (!fresh && chunk.getIndex() == 0) {  // the sender started this blob again: keep the new one
    bytes_ -= blobs_[name].size();
    blobs_[name].clear();
    expected->second = 0;
    fresh = true;
  }
  if (fresh) count_[name] = count;
  if (count_[name] != count || chunk.getIndex() != expected->second) {
    const std::string why =
        fmt::format("blob '{}' of checkpoint {}: chunk {} of {} out of order (expected {})", name,
                    step_, chunk.getIndex(), count, expected->second);
    reset();
    return why;
  }
  const auto data = chunk.getData();
  if (bytes_ + data.size() > max_total_bytes) {
    reset();
    return fmt::format("checkpoint {} exceeds {} bytes", chunk.getStep(), max_total_bytes);
  }
  std::string& blob = blobs_[name];
  blob.append(reinterpret_cast<const char*>(data.begin()), data.size());
  bytes_ += data.size();
  ++expected->second;
  if (expected->second == count && storage::crc32_of(blob) != chunk.getChecksum()) {
    const std::string why =
        fmt::format("blob '{}' of checkpoint {}: checksum mismatch", name, chunk.getStep());
    reset();
    return why;
  }
  return "";
}

bool CheckpointAssembler::complete(uint64_t expected_bytes) const {
  if (step_ < 0 || next_index_.empty() || bytes_ != expected_bytes) return false;
  return std::all_of(next_index_.begin(), next_index_.end(),
                     [&](const auto& kv) { return kv.second == count_.at(kv.first); });
}

Blobs CheckpointAssembler::take() {
  Blobs out = std::move(blobs_);
  reset();
  return out;
}

void CheckpointAssembler::reset() {
  step_ = -1;
  bytes_ = 0;
  blobs_.clear();
  next_index_.clear();
  count_.clear();
}

}  // namespace saccade::control
