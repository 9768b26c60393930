#include "workers/data_plane/batch_codec.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

#include "schemas/wire.h"
#include "test_data.h"

namespace saccade::data_plane {
namespace {

constexpr int64_t kImages = 3;

// A batch of random pixels, positions (a NaN and a negative zero among them: bits must
// survive) and drawn augmentations.
data::SslBatch random_batch(const data::ViewOptions& views) {
  data::SslBatch b;
  b.allocate(views, kImages);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-3, 3);
  for (data::PixelViews* p :
       {&b.teacher_global, &b.student_global, &b.student_local, &b.teacher_seq, &b.student_seq}) {
    for (uint8_t& v : p->pixels) v = static_cast<uint8_t>(rng());
    for (float& v : p->positions) v = u(rng);
    for (int64_t a = 0; a < p->augmented_views(); ++a) {
      data::encode_view_augment(
          data::draw_view_augment({1.0f, 0.5f, 0.5f, 0.5f}, views.channels, views.patch_size, rng),
          p->augment.data() + a * data::kViewAugmentFloats);
    }
  }
  b.teacher_global.positions[5] = std::numeric_limits<float>::quiet_NaN();
  b.student_seq.positions[1] = -0.0f;
  b.labels = {3, -1, 7};
  b.indices = {11, 0, 42};
  b.skipped_corrupt = 2;
  return b;
}

void expect_bit_equal(const data::SslBatch& a, const data::SslBatch& b) {
  testing::expect_same_batch(a, b);
  EXPECT_EQ(a.skipped_corrupt, b.skipped_corrupt);
}

// A batch of `views` written into a message, and the tools to spoil it.
class BatchCodec : public ::testing::Test {
 protected:
  explicit BatchCodec(data::ViewOptions views = testing::small_views())
      : views_(std::move(views)), batch_(random_batch(views_)) {}
  void SetUp() override {
    out_ = message_->initRoot<wire::Batch>();
    write_batch(batch_, 99, {2, 17}, out_);
  }

  wire::Tensor::Builder tensor(const std::string& name) {
    for (auto t : out_.getTensors()) {
      if (std::string(t.getName().cStr()) == name) return t;
    }
    ADD_FAILURE() << "no tensor " << name;
    return out_.getTensors()[0];
  }

  // batch_ sent as a learner receives it: flattened into a frame, which read_batch reads in
  // place. `watch` sees the frame's lifetime; the test keeps no reference to it.
  std::optional<data::SslBatch> read_in_place(std::weak_ptr<const wire::Message>& watch) {
    capnp::MallocMessageBuilder builder;
    auto envelope = wire::start_envelope(builder, {"job", wire::Role::DATA, 0, "node"}, 0, 0);
    write_batch(batch_, 99, {2, 17}, envelope.getBody().initBatch());
    wire::Received received = wire::open_frame(wire::to_zmq(builder), {"job", size_t{1} << 30});
    if (!received.message) ADD_FAILURE() << received.why;
    if (!received.message) return std::nullopt;
    auto frame = std::make_shared<const wire::Message>(std::move(*received.message));
    watch = frame;
    std::string why;
    auto back = read_batch(frame->envelope().getBody().getBatch(), views_, kImages, why, frame);
    EXPECT_TRUE(back.has_value()) << why;
    return back;
  }

  // Expects a refusal whose reason names `needle`.
  void expect_refused(const std::string& needle) {
    std::string why;
    EXPECT_FALSE(read_batch(out_.asReader(), views_, kImages, why).has_value());
    EXPECT_NE(why.find(needle), std::string::npos) << why;
  }

  data::ViewOptions views_;
  data::SslBatch batch_;
  // Held by pointer: its destructor may throw, which a fixture's destructor may not.
  std::unique_ptr<capnp::MallocMessageBuilder> message_ =
      std::make_unique<capnp::MallocMessageBuilder>();
  wire::Batch::Builder out_ = nullptr;
};

TEST_F(BatchCodec, RoundTripIsBitExact) {
  EXPECT_EQ(out_.getBatchId(), 99u);
  EXPECT_EQ(out_.getEpoch(), 2);
  EXPECT_EQ(out_.getPosition(), 17);
  EXPECT_EQ(out_.getImages(), 3u);
  EXPECT_EQ(out_.getTensors().size(), 17u);
  EXPECT_EQ(std::string(out_.getTensors()[0].getName().cStr()), "teacher_global.pixels");
  std::string why;
  const auto back = read_batch(out_.asReader(), views_, kImages, why);
  ASSERT_TRUE(back.has_value()) << why;
  expect_bit_equal(batch_, *back);
}

// In place, the pixels are the frame's bytes (not a copy), the frame lives as long as the
// batch does, and the batch is the one sent, bit for bit.
TEST_F(BatchCodec, ReadInPlaceBorrowsThePixelsAndKeepsTheFrame) {
  std::weak_ptr<const wire::Message> frame;
  auto back = read_in_place(frame);
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(frame.expired());
  expect_bit_equal(batch_, *back);
  for (const data::PixelViews* p : {&back->teacher_global, &back->student_global,
                                    &back->student_local, &back->teacher_seq, &back->student_seq})
    EXPECT_TRUE(p->pixels.borrowed());
  EXPECT_THROW(back->student_seq.pixels_of(0), std::logic_error);  // read-only
  data::SslBatch copy = *back;                                     // shares the frame
  back.reset();
  EXPECT_FALSE(frame.expired());
  expect_bit_equal(batch_, copy);
  copy = {};
  EXPECT_TRUE(frame.expired());
}

TEST_F(BatchCodec, TensorOrderDoesNotMatter) {
  auto shuffled = std::make_unique<capnp::MallocMessageBuilder>();
  auto copy = shuffled->initRoot<wire::Batch>();
  copy.setImages(out_.getImages());
  copy.setSkippedCorrupt(out_.getSkippedCorrupt());
  auto tensors = copy.initTensors(out_.getTensors().size());
  for (unsigned i = 0; i < tensors.size(); ++i)
    tensors.setWithCaveats(i, out_.getTensors()[tensors.size() - 1 - i].asReader());
  std::string why;
  const auto back = read_batch(copy.asReader(), views_, kImages, why);
  ASSERT_TRUE(back.has_value()) << why;
  expect_bit_equal(batch_, *back);
}

TEST_F(BatchCodec, RefusesAnotherImageCount) {
  std::string why;
  EXPECT_FALSE(read_batch(out_.asReader(), views_, kImages + 1, why).has_value());
  EXPECT_NE(why.find("3 images, expected 4"), std::string::npos) << why;
}

TEST_F(BatchCodec, RefusesOtherViews) {
  data::ViewOptions other = views_;
  other.glimpses = 3;
  std::string why;
  EXPECT_FALSE(read_batch(out_.asReader(), other, kImages, why).has_value());
  EXPECT_NE(why.find("teacher_seq.pixels"), std::string::npos) << why;
}

TEST_F(BatchCodec, RefusesAWrongDtype) {
  tensor("student_local.positions").setDtype(wire::DType::FLOAT16);
  expect_refused("\"student_local.positions\" has dtype");
}

TEST_F(BatchCodec, RefusesAWrongShape) {
  tensor("teacher_global.pixels").getShape().set(2, 1);
  expect_refused("\"teacher_global.pixels\" has shape [3, 16, 1, 4, 4]");
}

TEST_F(BatchCodec, RefusesAShapeOfAnotherRank) {
  tensor("labels").initShape(2);
  expect_refused("\"labels\" has shape [0, 0]");
}

TEST_F(BatchCodec, RefusesAWrongByteCount) {
  tensor("indices").initData(7);
  expect_refused("\"indices\" holds 7 bytes, its shape needs 24");
}

TEST_F(BatchCodec, RefusesAnUnknownOrMissingName) {
  tensor("student_seq.pixels").setName("student_seq.pixelz");
  expect_refused("\"student_seq.pixels\" is missing");
}

// An augmentation the data plane could not have drawn (here a jitter order that is not a
// permutation) is refused by tensor, row and column, not applied.
TEST_F(BatchCodec, RefusesAnAugmentationThatIsNotADraw) {
  auto bytes = tensor("teacher_seq.augment").getData();
  const float duplicate = 2.0f;
  std::memcpy(bytes.begin() + (1 * data::kViewAugmentFloats + data::kAugOrder) * sizeof(float),
              &duplicate, sizeof(float));
  std::memcpy(bytes.begin() + (1 * data::kViewAugmentFloats + data::kAugOrder + 1) * sizeof(float),
              &duplicate, sizeof(float));
  expect_refused("\"teacher_seq.augment\" row 1: augmentation order {2, 2,");
}

TEST_F(BatchCodec, RefusesADuplicateName) {
  tensor("labels").setName("indices");
  expect_refused("\"indices\" appears twice");
}

TEST_F(BatchCodec, RefusesAMissingTensor) {
  out_.initTensors(16);
  expect_refused("16 tensors, expected 17");
}

// views.cut_on = "learner": boxes instead of pixels, and one "image.i" [H, W, C] per image.
data::ViewOptions learner_cut_views() {
  data::ViewOptions views = testing::small_views();
  views.cut_on_learner = true;
  views.ship_max_side = 64;
  return views;
}

class LearnerCutCodec : public BatchCodec {
 protected:
  LearnerCutCodec() : BatchCodec(learner_cut_views()) {
    for (size_t i = 0; i < batch_.images.size(); ++i) {  // 1,920 to 7,440 bytes: some borrowed
      data::ShippedImage& image = batch_.images[i];
      image.height = 10 + 15 * static_cast<int>(i);
      image.width = 64 - static_cast<int>(i);
      const size_t bytes = static_cast<size_t>(image.height * image.width * views_.channels);
      image.pixels.assign((bytes + 7) / 8 * 8, 0);  // zeros to the next word, as shipped
      for (size_t j = 0; j < bytes; ++j) image.pixels[j] = static_cast<uint8_t>(j * 7 + i);
    }
    for (data::PixelViews* p : {&batch_.teacher_global, &batch_.student_global,
                                &batch_.student_local, &batch_.teacher_seq, &batch_.student_seq}) {
      for (size_t j = 0; j < p->boxes.size(); j += 4) {  // x0, y0, x1, y1: non-empty boxes
        p->boxes[j] = static_cast<float>(j % 13);
        p->boxes[j + 1] = static_cast<float>(j % 5);
        p->boxes[j + 2] = p->boxes[j] + 3.5f;
        p->boxes[j + 3] = p->boxes[j + 1] + 2.25f;
      }
    }
  }
};

TEST_F(LearnerCutCodec, RoundTripCarriesImagesAndBoxes) {
  EXPECT_EQ(out_.getTensors().size(), 17u + kImages);
  std::string why;
  const auto back = read_batch(out_.asReader(), views_, kImages, why);
  ASSERT_TRUE(back.has_value()) << why;
  expect_bit_equal(batch_, *back);
  ASSERT_EQ(back->images.size(), static_cast<size_t>(kImages));
  for (size_t i = 0; i < back->images.size(); ++i) {
    EXPECT_EQ(back->images[i].height, batch_.images[i].height);
    EXPECT_EQ(back->images[i].width, batch_.images[i].width);
    EXPECT_EQ(back->images[i].pixels, batch_.images[i].pixels);
  }
  EXPECT_TRUE(testing::same_bits(back->student_seq.boxes, batch_.student_seq.boxes));
  EXPECT_LE(out_.totalSize().wordCount * 8, batch_frame_bytes(views_, kImages));
}

// Shipped images are read in place too, with the zeros after them to the next word.
TEST_F(LearnerCutCodec, ReadInPlaceBorrowsTheImages) {
  std::weak_ptr<const wire::Message> frame;
  const auto back = read_in_place(frame);
  ASSERT_TRUE(back.has_value());
  expect_bit_equal(batch_, *back);
  for (const data::ShippedImage& image : back->images) {
    EXPECT_TRUE(image.pixels.borrowed());
    EXPECT_EQ(image.pixels.size() % 8, 0u);
  }
  EXPECT_TRUE(back->teacher_global.pixels.empty());  // boxes travel instead
}

TEST_F(LearnerCutCodec, RefusesAnImageOverTheCapOrOfOtherChannels) {
  tensor("image.1").getShape().set(1, 65);
  expect_refused("\"image.1\" has shape [25, 65, 3], expected [H, W, 3] with sides in 1..64");
  tensor("image.1").getShape().set(1, 63);
  tensor("image.2").getShape().set(2, 1);
  expect_refused("\"image.2\" has shape [40, 62, 1]");
}

TEST_F(LearnerCutCodec, RefusesABoxTheCutWouldNotAccept) {
  auto bytes = tensor("student_local.boxes").getData();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.begin() + 2 * sizeof(float), &nan, sizeof(float));
  expect_refused("\"student_local.boxes\": ");
}

}  // namespace
}  // namespace saccade::data_plane
