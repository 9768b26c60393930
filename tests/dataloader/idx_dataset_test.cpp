#include "dataloader/idx_dataset.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <opencv2/core.hpp>

#include "tests/dataloader/expect_error.h"
#include "tests/dataloader/temp_dir.h"

namespace saccade::data {
namespace {

using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr int kCount = 7, kRows = 3, kCols = 5;

std::vector<uint8_t> make_pixels() {
  std::vector<uint8_t> pixels(kCount * kRows * kCols);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return pixels;
}
const std::vector<uint8_t> kLabels = {3, 0, 9, 1, 1, 4, 2};

class IdxFiles : public ::testing::TestWithParam<bool> {};  // parameter: gzip

TEST_P(IdxFiles, ParsesImagesAndLabels) {
  const bool gzip = GetParam();
  TempDir dir;
  const auto pixels = make_pixels();
  write_idx_images(dir.file("images"), kCount, kRows, kCols, pixels, gzip);
  write_idx_labels(dir.file("labels"), kLabels, gzip);
  const auto head = read_bytes(dir.file("images"));
  ASSERT_GE(head.size(), 2u);
  EXPECT_EQ(head[0] == 0x1f && head[1] == 0x8b, gzip);  // the writer really (not) compressed

  IdxDataset dataset({dir.file("images"), dir.file("labels"), 1});
  ASSERT_EQ(dataset.size(), kCount);
  EXPECT_EQ(dataset.rows(), kRows);
  EXPECT_EQ(dataset.cols(), kCols);
  EXPECT_EQ(dataset.channels(), 1);
  EXPECT_EQ(dataset.num_classes(), 10);
  for (int i = 0; i < kCount; ++i) {
    const auto sample = dataset.get(i);
    ASSERT_TRUE(sample);
    ASSERT_EQ(sample->image.type(), CV_8UC1);
    ASSERT_EQ(sample->image.rows, kRows);
    ASSERT_EQ(sample->image.cols, kCols);
    for (int y = 0; y < kRows; ++y) {
      for (int x = 0; x < kCols; ++x) {
        ASSERT_EQ(sample->image.at<uint8_t>(y, x), pixels[(i * kRows + y) * kCols + x]);
      }
    }
    EXPECT_EQ(sample->label, kLabels[i]);
    EXPECT_EQ(sample->source, "idx:" + dir.file("images") + "#" + std::to_string(i));
  }
  EXPECT_EQ(dataset.stats().decoded(), kCount);
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 0);
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxFiles, ::testing::Bool());

TEST(IdxDataset, ThreeChannelsReplicateGreyAndNoLabelsMeansUnlabeled) {
  TempDir dir;
  const auto pixels = make_pixels();
  write_idx_images(dir.file("images"), kCount, kRows, kCols, pixels, false);
  IdxDataset dataset({dir.file("images"), "", 3});
  EXPECT_EQ(dataset.num_classes(), 0);
  EXPECT_EQ(dataset.channels(), 3);
  const auto sample = dataset.get(2);
  ASSERT_TRUE(sample);
  EXPECT_EQ(sample->label, -1);
  ASSERT_EQ(sample->image.type(), CV_8UC3);
  const auto pixel = sample->image.at<cv::Vec3b>(1, 4);
  const uint8_t expected = pixels[(2 * kRows + 1) * kCols + 4];
  EXPECT_EQ(pixel, cv::Vec3b(expected, expected, expected));
}

TEST(IdxDataset, SamplesOwnTheirPixels) {
  TempDir dir;
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), false);
  IdxDataset dataset({dir.file("images"), "", 1});
  auto first = dataset.get(0);
  first->image.setTo(255);  // must not write into the dataset
  EXPECT_NE(dataset.get(0)->image.at<uint8_t>(0, 0), 255);
}

TEST(IdxDataset, WrongMagicNamesFileAndField) {
  TempDir dir;
  write_idx_labels(dir.file("labels"), kLabels, false);
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("labels"), "", 1});
      },
      {dir.file("labels"), "magic", "0x00000803", "0x00000801"});
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), true);
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("images"), dir.file("images"), 1});
      },
      {"labels", dir.file("images"), "magic", "0x00000801", "0x00000803"});
}

TEST(IdxDataset, TruncatedOrOverlongDataIsRejected) {
  TempDir dir;
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), false);
  auto bytes = read_bytes(dir.file("images"));
  write_bytes(dir.file("short"), {bytes.begin(), bytes.end() - 1});
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("short"), "", 1});
      },
      {dir.file("short"), "data length", "105", "104", "truncated"});
  auto longer = bytes;
  longer.push_back(0);
  write_bytes(dir.file("long"), longer);
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("long"), "", 1});
      },
      {dir.file("long"), "data length", "trailing"});
  write_bytes(dir.file("header"), {bytes.begin(), bytes.begin() + 10});  // cut inside the dims
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("header"), "", 1});
      },
      {dir.file("header"), "dimensions", "16 bytes"});
  write_bytes(dir.file("tiny"), {0, 0});
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("tiny"), "", 1});
      },
      {dir.file("tiny"), "magic", "too short"});
}

TEST(IdxDataset, TruncatedGzipStreamIsRejected) {
  TempDir dir;
  write_idx_images(dir.file("images.gz"), kCount, kRows, kCols, make_pixels(), true);
  auto bytes = read_bytes(dir.file("images.gz"));
  write_bytes(dir.file("cut.gz"), {bytes.begin(), bytes.begin() + bytes.size() / 2});
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("cut.gz"), "", 1});
      },
      {dir.file("cut.gz"), "gzip"});
  bytes[bytes.size() / 2] ^= 0xff;  // corrupt the deflate stream (or its CRC)
  write_bytes(dir.file("bad.gz"), bytes);
  expect_error<std::runtime_error>(
      [&] {
        IdxDataset({dir.file("bad.gz"), "", 1});
      },
      {dir.file("bad.gz"), "gzip"});
}

TEST(IdxDataset, LabelCountMismatchNamesBothFiles) {
  TempDir dir;
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), false);
  write_idx_labels(dir.file("labels"), {1, 2, 3}, false);
  expect_error<std::invalid_argument>(
      [&] {
        IdxDataset({dir.file("images"), dir.file("labels"), 1});
      },
      {"label count", dir.file("labels"), dir.file("images"), "3 labels", "7 images"});
}

TEST(IdxDataset, MissingFileAndBadArgumentsAreClear) {
  TempDir dir;
  expect_error<std::invalid_argument>(
      [&] {
        IdxDataset({dir.file("nope"), "", 1});
      },
      {dir.file("nope"), "cannot be opened"});
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), false);
  expect_error<std::invalid_argument>(
      [&] {
        IdxDataset({dir.file("images"), "", 2});
      },
      {"channels", "2"});
  IdxDataset dataset({dir.file("images"), "", 1});
  EXPECT_THROW(dataset.get(kCount), std::out_of_range);
  EXPECT_THROW(dataset.get(-1), std::out_of_range);
  expect_error<std::invalid_argument>(
      [&] { write_idx_images(dir.file("x"), 2, 3, 3, std::vector<uint8_t>(17), false); },
      {"17 bytes", "count 2"});
}

TEST(IdxDataset, ConcurrentReadsMatchSerialReads) {
  TempDir dir;
  write_idx_images(dir.file("images"), kCount, kRows, kCols, make_pixels(), true);
  IdxDataset dataset({dir.file("images"), "", 1});
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < kCount; ++i) {
          const auto a = dataset.get(i);
          const auto b = dataset.get(i);
          if (cv::norm(a->image, b->image, cv::NORM_INF) != 0) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(dataset.stats().decoded(), 4 * 50 * kCount * 2);  // the counter is exact under races
}

}  // namespace
}  // namespace saccade::data
