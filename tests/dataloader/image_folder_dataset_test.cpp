#include "dataloader/image_folder_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include <opencv2/imgcodecs.hpp>

#include "tests/dataloader/expect_error.h"
#include "tests/dataloader/temp_dir.h"

namespace saccade::data {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

// A BGR image (what cv::imwrite expects) of one colour, with a marker pixel.
cv::Mat solid(int rows, int cols, cv::Vec3b bgr) {
  cv::Mat image(rows, cols, CV_8UC3, cv::Scalar(bgr[0], bgr[1], bgr[2]));
  return image;
}

// root/apple: a.png (40x30), b.JPG (17x64), nested/c.bmp (5x5), corrupt.jpg, empty.png, notes.txt
// root/banana: z.jpeg (100x7); root/.hidden/x.png is ignored.
struct Fixture {
  TempDir dir;
  std::string root = (dir.path() / "root").string();
  Fixture() {
    fs::create_directories(dir.path() / "root/apple/nested");
    fs::create_directories(dir.path() / "root/banana");
    fs::create_directories(dir.path() / "root/.hidden");
    cv::imwrite(root + "/apple/a.png", solid(30, 40, {10, 20, 200}));
    cv::imwrite(root + "/apple/b.JPG", solid(64, 17, {0, 255, 0}));
    cv::imwrite(root + "/apple/nested/c.bmp", solid(5, 5, {1, 2, 3}));
    std::vector<unsigned char> noise(3000);
    uint32_t x = 12345;
    for (auto& byte : noise)
      byte = static_cast<unsigned char>((x = x * 1664525u + 1013904223u) >> 24);
    noise[0] = 0x42;  // not a JPEG/PNG signature by chance
    write_bytes(root + "/apple/corrupt.jpg", noise);
    write_bytes(root + "/apple/empty.png", {});
    write_bytes(root + "/apple/notes.txt", {'h', 'i'});
    cv::imwrite(root + "/banana/z.jpeg", solid(7, 100, {255, 255, 255}));
    cv::imwrite(root + "/.hidden/x.png", solid(3, 3, {0, 0, 0}));
  }
};

TEST(ImageFolderDataset, ListsClassesAndFilesSorted) {
  Fixture f;
  ImageFolderDataset dataset({f.root, 3});
  EXPECT_EQ(dataset.class_names(), (std::vector<std::string>{"apple", "banana"}));
  EXPECT_EQ(dataset.num_classes(), 2);
  ASSERT_EQ(dataset.size(), 6);  // notes.txt and .hidden are not images of a class
  const std::vector<std::string> expected = {"apple/a.png",        "apple/b.JPG",
                                             "apple/corrupt.jpg",  "apple/empty.png",
                                             "apple/nested/c.bmp", "banana/z.jpeg"};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dataset.path(i), f.root + "/" + expected[i]);
}

TEST(ImageFolderDataset, DecodesAnySizeAsRgbWithLabels) {
  Fixture f;
  ImageFolderDataset dataset({f.root, 3});
  struct Want {
    int index, rows, cols;
    int64_t label;
  };
  for (const Want& w :
       {Want{0, 30, 40, 0}, Want{1, 64, 17, 0}, Want{4, 5, 5, 0}, Want{5, 7, 100, 1}}) {
    const auto sample = dataset.get(w.index);
    ASSERT_TRUE(sample) << w.index;
    EXPECT_EQ(sample->image.type(), CV_8UC3);
    EXPECT_EQ(sample->image.rows, w.rows);
    EXPECT_EQ(sample->image.cols, w.cols);
    EXPECT_EQ(sample->label, w.label);
    EXPECT_EQ(sample->source, dataset.path(w.index));
  }
  // PNG and BMP are lossless: the BGR written comes back as RGB.
  EXPECT_EQ(dataset.get(0)->image.at<cv::Vec3b>(29, 39), cv::Vec3b(200, 20, 10));
  EXPECT_EQ(dataset.get(4)->image.at<cv::Vec3b>(2, 2), cv::Vec3b(3, 2, 1));
}

TEST(ImageFolderDataset, GrayscaleWhenConfiguredForOneChannel) {
  Fixture f;
  ImageFolderDataset dataset({f.root, 1});
  const auto sample = dataset.get(5);
  ASSERT_TRUE(sample);
  EXPECT_EQ(sample->image.type(), CV_8UC1);
  EXPECT_NEAR(sample->image.at<uint8_t>(3, 50), 255, 2);
}

TEST(ImageFolderDataset, CorruptAndEmptyFilesAreSkippedAndCountedOnce) {
  Fixture f;
  ImageFolderDataset dataset({f.root, 3});
  for (int round = 0; round < 3; ++round) {
    EXPECT_FALSE(dataset.get(2));  // corrupt.jpg
    EXPECT_FALSE(dataset.get(3));  // empty.png
  }
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 2);
  auto skipped = dataset.stats().skipped_paths();
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped,
            (std::vector<std::string>{f.root + "/apple/corrupt.jpg", f.root + "/apple/empty.png"}));
  EXPECT_EQ(dataset.stats().decoded(), 0);
  // The skipping policy: the next good sample, deterministically.
  const Sample next = get_or_next_good(dataset, 2);
  EXPECT_EQ(next.source, f.root + "/apple/nested/c.bmp");
  EXPECT_EQ(get_or_next_good(dataset, 3).source, next.source);
  EXPECT_EQ(get_or_next_good(dataset, 5).source, f.root + "/banana/z.jpeg");
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 2);
  EXPECT_EQ(dataset.stats().decoded(), 3);
}

TEST(ImageFolderDataset, ConcurrentReadersCountEachCorruptFileOnce) {
  Fixture f;
  ImageFolderDataset dataset({f.root, 3});
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (int k = 0; k < dataset.size(); ++k) {
          const int64_t i = (k + t) % dataset.size();  // threads start at different files
          (dataset.get(i) ? good : bad)++;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 4 * 5 * 4);
  EXPECT_EQ(bad.load(), 4 * 5 * 2);
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 2);
  EXPECT_EQ(dataset.stats().decoded(), 4 * 5 * 4);
}

TEST(ImageFolderDataset, AllCorruptIsAnErrorOnlyWhenNothingIsLeft) {
  TempDir dir;
  fs::create_directories(dir.path() / "only");
  write_bytes(dir.file("only/a.png"), {});
  ImageFolderDataset dataset({dir.path().string(), 3});
  expect_error<std::runtime_error>([&] { get_or_next_good(dataset, 0); }, {"all 1 samples"});
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 1);
}

TEST(ImageFolderDataset, BadRootsAreClearErrors) {
  TempDir dir;
  const std::string missing = dir.file("missing");
  expect_error<std::invalid_argument>(
      [&] {
        ImageFolderDataset({missing, 3});
      },
      {missing, "does not exist"});
  write_bytes(dir.file("plain"), {'x'});
  expect_error<std::invalid_argument>(
      [&] {
        ImageFolderDataset({dir.file("plain"), 3});
      },
      {dir.file("plain"), "not a folder"});
  fs::create_directories(dir.path() / "empty");
  expect_error<std::invalid_argument>(
      [&] {
        ImageFolderDataset({dir.file("empty"), 3});
      },
      {dir.file("empty"), "no class subfolders"});
  fs::create_directories(dir.path() / "noimages/cls");
  write_bytes(dir.file("noimages/cls/readme.txt"), {'x'});
  expect_error<std::invalid_argument>(
      [&] {
        ImageFolderDataset({dir.file("noimages"), 3});
      },
      {dir.file("noimages"), "1 class folders", ".png"});
  fs::create_directories(dir.path() / "ok/cls");
  cv::imwrite(dir.file("ok/cls/a.png"), solid(2, 2, {0, 0, 0}));
  expect_error<std::invalid_argument>(
      [&] {
        ImageFolderDataset({dir.file("ok"), 4});
      },
      {"channels", "4"});
  ImageFolderDataset ok({dir.file("ok"), 3});
  EXPECT_THROW(ok.get(1), std::out_of_range);
}

}  // namespace
}  // namespace saccade::data
