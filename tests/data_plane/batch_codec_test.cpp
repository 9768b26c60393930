#include "workers/data/batch_codec.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "test_data.h"

namespace saccade::workers {
namespace {

constexpr int64_t kImages = 3;

// A batch of random values (a NaN and a negative zero among them: bits must survive).
data::SslBatch random_batch(const data::ViewOptions& views) {
  data::SslBatch b;
  b.allocate(views, kImages);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3, 3);
  for (data::PatchBatch* p :
       {&b.teacher_global, &b.student_global, &b.student_local, &b.teacher_seq, &b.student_seq}) {
    for (float& v : p->patches) v = u(rng);
    for (float& v : p->positions) v = u(rng);
  }
  b.teacher_global.patches[5] = std::numeric_limits<float>::quiet_NaN();
  b.student_seq.positions[1] = -0.0f;
  b.labels = {3, -1, 7};
  b.indices = {11, 0, 42};
  b.skipped_corrupt = 2;
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bit_equal(const data::SslBatch& a, const data::SslBatch& b) {
  EXPECT_EQ(a.batch_size, b.batch_size);
  const data::PatchBatch data::SslBatch::*sets[] = {
      &data::SslBatch::teacher_global, &data::SslBatch::student_global,
      &data::SslBatch::student_local, &data::SslBatch::teacher_seq, &data::SslBatch::student_seq};
  for (auto set : sets) {
    EXPECT_EQ((a.*set).views, (b.*set).views);
    EXPECT_EQ((a.*set).tokens, (b.*set).tokens);
    EXPECT_TRUE(same_bits((a.*set).patches, (b.*set).patches));
    EXPECT_TRUE(same_bits((a.*set).positions, (b.*set).positions));
  }
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.skipped_corrupt, b.skipped_corrupt);
}

class BatchCodec : public ::testing::Test {
 protected:
  BatchCodec() : views_(testing::small_views()), batch_(random_batch(views_)) {
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
  EXPECT_EQ(out_.getTensors().size(), 12u);
  EXPECT_EQ(std::string(out_.getTensors()[0].getName().cStr()), "teacher_global.patches");
  std::string why;
  const auto back = read_batch(out_.asReader(), views_, kImages, why);
  ASSERT_TRUE(back.has_value()) << why;
  expect_bit_equal(batch_, *back);
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
  EXPECT_NE(why.find("teacher_seq.patches"), std::string::npos) << why;
}

TEST_F(BatchCodec, RefusesAWrongDtype) {
  tensor("student_local.positions").setDtype(wire::DType::FLOAT16);
  expect_refused("\"student_local.positions\" has dtype");
}

TEST_F(BatchCodec, RefusesAWrongShape) {
  tensor("teacher_global.patches").getShape().set(2, 1);
  expect_refused("\"teacher_global.patches\" has shape [3, 16, 1, 4, 4]");
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
  tensor("student_seq.patches").setName("student_seq.patchez");
  expect_refused("\"student_seq.patches\" is missing");
}

TEST_F(BatchCodec, RefusesADuplicateName) {
  tensor("labels").setName("indices");
  expect_refused("\"indices\" appears twice");
}

TEST_F(BatchCodec, RefusesAMissingTensor) {
  out_.initTensors(11);
  expect_refused("11 tensors, expected 12");
}

}  // namespace
}  // namespace saccade::workers
