// Bytes owned by the buffer, or borrowed from memory another object keeps alive: a learner
// reads a received batch's pixels in place, from the frame they came in, instead of copying
// 2 MB per image into buffers of its own (workers/data_plane/batch_codec.h). A copy of a
// buffer copies owned bytes and shares borrowed ones, so borrowed bytes are read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace saccade {

class ByteBuffer {
 public:
  ByteBuffer() = default;

  // Owns `n` bytes of `value` (dropping any borrowed bytes).
  void assign(size_t n, uint8_t value);
  // Borrows `n` bytes at `data`, which `keeper` keeps alive (and unchanged) while it lives.
  void borrow(const uint8_t* data, size_t n, std::shared_ptr<const void> keeper);
  bool borrowed() const { return keeper_ != nullptr; }

  size_t size() const { return keeper_ ? borrowed_size_ : owned_.size(); }
  bool empty() const { return size() == 0; }
  const uint8_t* data() const { return keeper_ ? borrowed_ : owned_.data(); }
  // Writable bytes: owned ones only (throws std::logic_error when borrowed).
  uint8_t* data();
  const uint8_t* begin() const { return data(); }
  const uint8_t* end() const { return data() + size(); }
  uint8_t* begin() { return data(); }
  uint8_t* end() { return data() + size(); }
  uint8_t operator[](size_t i) const { return data()[i]; }
  uint8_t& operator[](size_t i) { return data()[i]; }

  friend bool operator==(const ByteBuffer& a, const ByteBuffer& b);  // the same bytes

 private:
  std::vector<uint8_t> owned_;          // owned bytes; empty while borrowing
  std::shared_ptr<const void> keeper_;  // keeps the borrowed bytes alive; null when owning
  const uint8_t* borrowed_ = nullptr;   // not owned: inside what keeper_ keeps
  size_t borrowed_size_ = 0;
};

}  // namespace saccade
