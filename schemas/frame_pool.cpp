#include "schemas/frame_pool.h"

#include <capnp/serialize.h>

#include <kj/io.h>
#include <algorithm>
#include <memory>

namespace saccade::wire {

struct FramePool::Buffer {
  std::unique_ptr<capnp::word[]> words;  // owned; not zeroed: every frame overwrites it
  size_t capacity = 0;                   // in words
  FramePool* pool = nullptr;             // the pool it returns to
};

FramePool::FramePool(Options options) : options_(options) {}

FramePool::~FramePool() {
  for (Buffer* b : cached_) delete b;
}

FramePool& FramePool::process() {
  static FramePool* const pool = new FramePool(Options{});
  return *pool;
}

FramePool::Buffer* FramePool::take(size_t words) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest kept buffer that fits, so that large ones stay for large frames.
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      if ((*it)->capacity >= words &&
          (best == cached_.end() || (*it)->capacity < (*best)->capacity))
        best = it;
    }
    if (best != cached_.end()) {
      Buffer* b = *best;
      cached_.erase(best);
      ++stats_.reused;
      return b;
    }
    ++stats_.allocated;
  }
  // An eighth to spare, in 64 KiB steps, so that frames a little larger than this one
  // (images of other sizes when the learner cuts) fit the same buffer.
  constexpr size_t kStep = (size_t{64} << 10) / sizeof(capnp::word);
  const size_t capacity = (words + words / 8 + kStep - 1) / kStep * kStep;
  auto* b = new Buffer;
  b->words = std::make_unique_for_overwrite<capnp::word[]>(capacity);
  b->capacity = capacity;
  b->pool = this;
  return b;
}

void FramePool::give_back(Buffer* buffer) {
  Buffer* dropped = buffer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_.size() < options_.max_cached) {
      cached_.push_back(buffer);
      dropped = nullptr;
    } else if (!cached_.empty()) {
      // Full: keep the larger buffers, which serve every frame the smaller ones would.
      auto smallest = std::min_element(cached_.begin(), cached_.end(), [](Buffer* a, Buffer* b) {
        return a->capacity < b->capacity;
      });
      if ((*smallest)->capacity < buffer->capacity) std::swap(*smallest, dropped);
    }
  }
  delete dropped;
}

zmq::message_t FramePool::frame_of(capnp::MessageBuilder& builder) {
  const kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments =
      builder.getSegmentsForOutput();
  const size_t words = capnp::computeSerializedSizeInWords(segments);
  if (words * sizeof(capnp::word) < options_.min_bytes) {
    auto* flat = new kj::Array<capnp::word>(capnp::messageToFlatArray(segments));
    const kj::ArrayPtr<const kj::byte> bytes = flat->asBytes();
    return zmq::message_t(
        const_cast<kj::byte*>(bytes.begin()), bytes.size(),
        [](void*, void* hint) { delete static_cast<kj::Array<capnp::word>*>(hint); }, flat);
  }
  Buffer* b = take(words);
  const size_t size = words * sizeof(capnp::word);
  try {
    kj::ArrayOutputStream out(kj::arrayPtr(reinterpret_cast<kj::byte*>(b->words.get()), size));
    capnp::writeMessage(out, segments);
  } catch (...) {
    give_back(b);
    throw;
  }
  return zmq::message_t(
      b->words.get(), size,
      [](void*, void* hint) {
        auto* buffer = static_cast<Buffer*>(hint);
        buffer->pool->give_back(buffer);
      },
      b);
}

FramePool::Stats FramePool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.cached = cached_.size();
  for (const Buffer* b : cached_) s.cached_bytes += b->capacity * sizeof(capnp::word);
  return s;
}

}  // namespace saccade::wire
