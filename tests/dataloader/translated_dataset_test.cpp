#include "dataloader/translated_dataset.h"

#include <gtest/gtest.h>

#include <thread>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "dataloader/random.h"
#include "dataloader/resized_dataset.h"
#include "tests/dataloader/expect_error.h"

namespace saccade::data {
namespace {

using testing::expect_error;

// An in-memory base: digits with every pixel non-zero, labels i % 10, some entries corrupt.
class DigitDataset final : public Dataset {
 public:
  DigitDataset(int count, int side, std::vector<int64_t> corrupt = {}) {
    for (int i = 0; i < count; ++i) {
      cv::Mat digit(side, side, CV_8UC1);
      SplitMix64 rng(static_cast<uint64_t>(i) + 1000);
      for (int p = 0; p < side * side; ++p)
        digit.data[p] = static_cast<uint8_t>(1 + rng.below(255));
      digits_.push_back(digit);
    }
    for (int64_t i : corrupt) digits_[static_cast<size_t>(i)] = cv::Mat();
  }
  int64_t size() const override { return static_cast<int64_t>(digits_.size()); }
  int64_t num_classes() const override { return 10; }
  int channels() const override { return 1; }
  std::optional<Sample> get(int64_t index) const override {
    const cv::Mat& digit = digits_.at(static_cast<size_t>(index));
    if (digit.empty()) return std::nullopt;
    return Sample{digit.clone(), index % 10, "digit#" + std::to_string(index)};
  }
  const DatasetStats& stats() const override { return stats_; }
  const cv::Mat& digit(int64_t i) const { return digits_[static_cast<size_t>(i)]; }

 private:
  std::vector<cv::Mat> digits_;
  DatasetStats stats_;
};

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(TranslatedDataset, DigitIsCopiedWholeOntoABlackCanvas) {
  auto base = std::make_shared<DigitDataset>(50, 28);
  TranslatedDataset dataset(base, {60, 0, 8, 7});
  EXPECT_EQ(dataset.size(), 50);
  EXPECT_EQ(dataset.num_classes(), 10);
  int min_x = 60, max_x = 0, min_y = 60, max_y = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const auto sample = dataset.get(i);
    const auto layout = dataset.layout(i);
    ASSERT_TRUE(sample && layout);
    ASSERT_EQ(sample->image.size(), cv::Size(60, 60));
    EXPECT_EQ(sample->label, i % 10);
    EXPECT_TRUE(layout->clutter.empty());
    ASSERT_EQ(layout->digit.size(), cv::Size(28, 28));
    ASSERT_TRUE((layout->digit & cv::Rect(0, 0, 60, 60)) == layout->digit);
    EXPECT_TRUE(same(sample->image(layout->digit), base->digit(i))) << i;
    // Nothing but the digit: the canvas sum equals the digit's.
    EXPECT_EQ(cv::sum(sample->image)[0], cv::sum(base->digit(i))[0]);
    min_x = std::min(min_x, layout->digit.x), max_x = std::max(max_x, layout->digit.x);
    min_y = std::min(min_y, layout->digit.y), max_y = std::max(max_y, layout->digit.y);
  }
  // Positions spread over the whole allowed range [0, 32].
  EXPECT_LT(min_x, 8);
  EXPECT_GT(max_x, 24);
  EXPECT_LT(min_y, 8);
  EXPECT_GT(max_y, 24);
}

TEST(TranslatedDataset, SameSeedSameImagesInAnyOrderAndThread) {
  auto base = std::make_shared<DigitDataset>(40, 28);
  TranslatedDataset a(base, {60, 4, 8, 123});
  TranslatedDataset b(base, {60, 4, 8, 123});
  std::vector<cv::Mat> forward(40);
  for (int64_t i = 0; i < 40; ++i) forward[i] = a.get(i)->image;
  std::vector<cv::Mat> threaded(40);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = 39 - t; i >= 0; i -= 4) threaded[i] = b.get(i)->image;  // reverse order
    });
  }
  for (auto& thread : threads) thread.join();
  for (int64_t i = 0; i < 40; ++i) EXPECT_TRUE(same(forward[i], threaded[i])) << i;
}

TEST(TranslatedDataset, DifferentSeedsGiveDifferentImages) {
  auto base = std::make_shared<DigitDataset>(40, 28);
  TranslatedDataset a(base, {60, 4, 8, 1});
  TranslatedDataset b(base, {60, 4, 8, 2});
  int differing = 0;
  for (int64_t i = 0; i < 40; ++i) differing += !same(a.get(i)->image, b.get(i)->image);
  EXPECT_GE(differing, 38);  // a coincidence of all 4 clutter pieces and position is rare
}

TEST(TranslatedDataset, ClutterPiecesAreCropsOfOtherDigitsMaxCombined) {
  auto base = std::make_shared<DigitDataset>(30, 28);
  TranslatedDataset dataset(base, {100, 6, 12, 99});
  for (int64_t i = 0; i < 30; ++i) {
    const auto sample = dataset.get(i);
    const auto layout = dataset.layout(i);
    ASSERT_TRUE(sample && layout);
    ASSERT_EQ(sample->image.size(), cv::Size(100, 100));
    EXPECT_EQ(sample->label, i % 10);
    ASSERT_EQ(layout->clutter.size(), 6u);
    // Rebuild the image from the layout: black canvas, digit, then max of every piece.
    cv::Mat expected = cv::Mat::zeros(100, 100, CV_8UC1);
    base->digit(i).copyTo(expected(layout->digit));
    for (const auto& piece : layout->clutter) {
      EXPECT_NE(piece.source_index, i);
      EXPECT_EQ(piece.crop.size(), cv::Size(12, 12));
      ASSERT_TRUE((piece.crop & cv::Rect(0, 0, 28, 28)) == piece.crop);
      ASSERT_TRUE((piece.placed & cv::Rect(0, 0, 100, 100)) == piece.placed);
      cv::Mat target = expected(piece.placed);
      cv::max(target, base->digit(piece.source_index)(piece.crop), target);
    }
    EXPECT_TRUE(same(sample->image, expected)) << i;
    // Max-combining never hides a digit pixel.
    cv::Mat under_digit = sample->image(layout->digit);
    EXPECT_EQ(cv::countNonZero(under_digit < base->digit(i)), 0);
  }
}

TEST(TranslatedDataset, ClutterCountShowsOutsideTheDigit) {
  auto base = std::make_shared<DigitDataset>(20, 28);
  TranslatedDataset plain(base, {60, 0, 8, 5});
  TranslatedDataset cluttered(base, {60, 4, 8, 5});
  int64_t outside_plain = 0, outside_cluttered = 0;
  for (int64_t i = 0; i < 20; ++i) {
    for (auto [dataset, outside] :
         {std::pair{&plain, &outside_plain}, std::pair{&cluttered, &outside_cluttered}}) {
      cv::Mat image = dataset->get(i)->image.clone();
      image(dataset->layout(i)->digit).setTo(0);
      *outside += cv::countNonZero(image);
    }
  }
  EXPECT_EQ(outside_plain, 0);
  // 4 pieces of 64 non-zero pixels each, partly hidden under the digit or each other.
  EXPECT_GT(outside_cluttered, 20 * 64);
  EXPECT_LE(outside_cluttered, 20 * 4 * 64);
}

TEST(TranslatedDataset, CorruptDigitIsSkippedAndCorruptClutterSourceReplaced) {
  auto base = std::make_shared<DigitDataset>(3, 10, std::vector<int64_t>{1});
  TranslatedDataset dataset(base, {20, 8, 4, 3});
  EXPECT_FALSE(dataset.get(1));
  EXPECT_EQ(get_or_next_good(dataset, 1).label, 2);
  for (int64_t i : {0, 2}) {
    const auto sample = dataset.get(i);
    ASSERT_TRUE(sample);
    EXPECT_EQ(dataset.layout(i)->clutter.size(), 8u);
  }
}

TEST(TranslatedDataset, InvalidOptionsAreClear) {
  auto base = std::make_shared<DigitDataset>(3, 28);
  expect_error<std::invalid_argument>(
      [&] {
        TranslatedDataset(base, {20, 0, 8, 0});
      },
      {"canvas_size 20", "28x28"});
  expect_error<std::invalid_argument>(
      [&] {
        TranslatedDataset(base, {60, -1, 8, 0});
      },
      {"n_clutter", "-1"});
  expect_error<std::invalid_argument>(
      [&] {
        TranslatedDataset(base, {60, 1, 0, 0});
      },
      {"clutter_size", "0"});
  expect_error<std::invalid_argument>([&] { TranslatedDataset(nullptr, {}); }, {"null"});
}

// The evaluation's resolution sweep: the same content at more pixels.
TEST(ResizedDataset, ReplicatesOrInterpolatesKeepsLabelsAndSkipsCorruptOnes) {
  auto base = std::make_shared<DigitDataset>(3, 10, std::vector<int64_t>{1});
  const ResizedDataset x4(base, 4.0, /*bilinear=*/true), x1(base, 1.0), half(base, 0.5);
  EXPECT_EQ(x4.size(), 3);
  EXPECT_EQ(x4.num_classes(), 10);
  const auto big = x4.get(2);
  ASSERT_TRUE(big);
  EXPECT_EQ(big->image.size(), cv::Size(40, 40));
  EXPECT_EQ(big->label, 2);
  EXPECT_EQ(half.get(2)->image.size(), cv::Size(5, 5));
  EXPECT_TRUE(same(x1.get(2)->image, base->digit(2)));  // x1 is the image itself
  // Bilinear up-sampling keeps the content: the 4 x 4 block means are the source pixels, nearly.
  cv::Mat back;
  cv::resize(big->image, back, cv::Size(10, 10), 0, 0, cv::INTER_AREA);
  EXPECT_LE(cv::norm(back, base->digit(2), cv::NORM_L1) / 100.0, 30.0);
  // Pixel replication: block (i, j) of 3 x 3 is source pixel (i, j).
  const ResizedDataset x3(base, 3.0);
  cv::Mat replicated = x3.get(2)->image;
  ASSERT_EQ(replicated.size(), cv::Size(30, 30));
  for (int y = 0; y < 30; ++y)
    for (int x = 0; x < 30; ++x)
      ASSERT_EQ(replicated.at<uint8_t>(y, x), base->digit(2).at<uint8_t>(y / 3, x / 3)) << x << y;
  EXPECT_FALSE(x4.get(1));  // corrupt in the base: corrupt here
  EXPECT_EQ(get_or_next_good(x4, 1).label, 2);
  expect_error<std::invalid_argument>([&] { ResizedDataset(base, 0.0); }, {"scale", "> 0"});
  expect_error<std::invalid_argument>([&] { ResizedDataset(nullptr, 2.0); }, {"null"});
}

}  // namespace
}  // namespace saccade::data
