#include "common/byte_buffer.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace saccade {

void ByteBuffer::assign(size_t n, uint8_t value) {
  keeper_.reset();
  borrowed_ = nullptr;
  borrowed_size_ = 0;
  owned_.assign(n, value);
}

void ByteBuffer::borrow(const uint8_t* data, size_t n, std::shared_ptr<const void> keeper) {
  if (!keeper) throw std::invalid_argument("ByteBuffer::borrow: no keeper for the bytes");
  owned_ = {};  // frees the owned bytes
  keeper_ = std::move(keeper);
  borrowed_ = data;
  borrowed_size_ = n;
}

uint8_t* ByteBuffer::data() {
  if (keeper_) throw std::logic_error("ByteBuffer: borrowed bytes are read-only");
  return owned_.data();
}

bool operator==(const ByteBuffer& a, const ByteBuffer& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

}  // namespace saccade
