#include "common/byte_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace saccade {
namespace {

TEST(ByteBuffer, OwnsWritableBytes) {
  ByteBuffer b;
  EXPECT_TRUE(b.empty());
  b.assign(5, 7);
  EXPECT_FALSE(b.borrowed());
  ASSERT_EQ(b.size(), 5u);
  b[2] = 9;
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.end()), (std::vector<uint8_t>{7, 7, 9, 7, 7}));
  ByteBuffer copy = b;  // owned bytes are copied
  copy[0] = 1;
  EXPECT_EQ(b[0], 7);
  EXPECT_FALSE(copy == b);
}

// Borrowed bytes stay alive as long as any buffer borrowing them, after the borrower's
// keeper is gone elsewhere; they cannot be written; assign() owns again.
TEST(ByteBuffer, BorrowsBytesThatItsKeeperHoldsAlive) {
  std::weak_ptr<std::vector<uint8_t>> watch;
  ByteBuffer b;
  {
    auto frame = std::make_shared<std::vector<uint8_t>>(std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
    watch = frame;
    b.borrow(frame->data() + 2, 3, frame);
  }
  EXPECT_FALSE(watch.expired());  // b keeps the frame alive
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(std::vector<uint8_t>(std::as_const(b).begin(), std::as_const(b).end()),
            (std::vector<uint8_t>{3, 4, 5}));
  EXPECT_THROW(b.data(), std::logic_error);
  ByteBuffer shared = b;  // a copy shares the borrowed bytes
  EXPECT_EQ(std::as_const(shared).data(), std::as_const(b).data());
  ByteBuffer owned;
  owned.assign(3, 0);
  std::copy(std::as_const(b).begin(), std::as_const(b).end(), owned.begin());
  EXPECT_TRUE(owned == b);  // equality compares bytes, not storage
  b.assign(2, 0);
  EXPECT_FALSE(b.borrowed());
  EXPECT_FALSE(watch.expired());  // `shared` still borrows it
  shared = ByteBuffer();
  EXPECT_TRUE(watch.expired());
  EXPECT_THROW(b.borrow(nullptr, 0, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace saccade
