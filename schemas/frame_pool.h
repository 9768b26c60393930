// Reused buffers for large outgoing frames.
//
// A frame of a batch holds megabytes (31 MB for 16 images of ViT-S views). Flattened into
// a fresh allocation, every frame pays a page fault and a zeroed page per 4 KiB, because
// glibc maps allocations that large anew and unmaps them on free. The pool keeps a few
// buffers that ZeroMQ hands back once it has sent a frame, so a steady stream of frames
// is written into memory that is already mapped.
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>
#include <zmq.hpp>

namespace saccade::wire {

class FramePool {
 public:
  struct Options {
    size_t min_bytes = size_t{1} << 20;  // smaller frames get plain allocations
    size_t max_cached = 4;               // buffers kept while no frame uses them
  };
  struct Stats {
    uint64_t allocated = 0;   // buffers the pool allocated
    uint64_t reused = 0;      // frames written into a kept buffer
    size_t cached = 0;        // buffers kept now
    size_t cached_bytes = 0;  // their capacity
  };

  explicit FramePool(Options options);
  ~FramePool();  // frees the kept buffers; every frame of the pool must be closed before
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  // The pool wire::to_zmq uses. Never destroyed: ZeroMQ's I/O threads release sent
  // frames until the process ends.
  static FramePool& process();

  // Flattens a built message into a ZeroMQ message. A frame of at least min_bytes is
  // written into a pooled buffer, which returns to the pool when ZeroMQ releases the
  // frame (from any thread).
  zmq::message_t frame_of(capnp::MessageBuilder& builder);

  Stats stats() const;

 private:
  struct Buffer;
  Buffer* take(size_t words);
  void give_back(Buffer* buffer);

  const Options options_;
  mutable std::mutex mutex_;
  std::vector<Buffer*> cached_;  // owned; guarded by mutex_
  Stats stats_;                  // guarded by mutex_ (cached fields computed on read)
};

}  // namespace saccade::wire
