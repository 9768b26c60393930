#include "dataloader/dataset_factory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <opencv2/imgcodecs.hpp>

#include "dataloader/idx_dataset.h"
#include "dataloader/translated_dataset.h"
#include "tests/dataloader/expect_error.h"
#include "tests/dataloader/temp_dir.h"

namespace saccade::data {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;

TEST(MakeDataset, BuildsEveryKind) {
  TempDir dir;
  std::vector<uint8_t> pixels(12 * 28 * 28, 0);
  for (size_t i = 0; i < pixels.size(); i += 3) pixels[i] = 200;
  write_idx_images(dir.file("images.gz"), 12, 28, 28, pixels, true);
  write_idx_labels(dir.file("labels.gz"), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}, true);
  fs::create_directories(dir.path() / "folder/a");
  cv::imwrite(dir.file("folder/a/x.png"), cv::Mat(9, 9, CV_8UC3, cv::Scalar(1, 2, 3)));

  DatasetSpec idx;
  idx.kind = "idx";
  idx.images_path = dir.file("images.gz");
  idx.labels_path = dir.file("labels.gz");
  auto plain = make_dataset(idx);
  EXPECT_EQ(plain->size(), 12);
  EXPECT_EQ(plain->channels(), 1);
  EXPECT_EQ(plain->num_classes(), 10);

  DatasetSpec cluttered = idx;
  cluttered.kind = "cluttered";
  cluttered.canvas_size = 40;
  cluttered.n_clutter = 3;
  cluttered.seed = 5;
  auto c = make_dataset(cluttered);
  ASSERT_NE(dynamic_cast<TranslatedDataset*>(c.get()), nullptr);
  EXPECT_EQ(c->get(4)->image.size(), cv::Size(40, 40));
  EXPECT_EQ(c->get(4)->label, 4);
  EXPECT_EQ(dynamic_cast<TranslatedDataset*>(c.get())->layout(4)->clutter.size(), 3u);

  // item_scale resizes the digits before they are placed: a 28 px digit takes 56 x 56
  // pixels of the canvas, and its content is the digit's, enlarged.
  DatasetSpec large = cluttered;
  large.kind = "translated";
  large.canvas_size = 80;
  large.item_scale = 2.0;
  auto l = make_dataset(large);
  const cv::Rect item = dynamic_cast<TranslatedDataset*>(l.get())->layout(4)->digit;
  EXPECT_EQ(item.size(), cv::Size(56, 56));
  const cv::Mat canvas = l->get(4)->image;
  EXPECT_EQ(cv::countNonZero(canvas), cv::countNonZero(canvas(item)));  // nothing outside it
  // Enlarged, not cut or padded: the item's mean brightness is the digit's.
  EXPECT_NEAR(cv::mean(canvas(item))[0], cv::mean(plain->get(4)->image)[0], 3.0);
  EXPECT_GT(cv::countNonZero(canvas(item)), 56 * 56 / 4);
  large.item_scale = 0;
  expect_error<std::invalid_argument>([&] { make_dataset(large); }, {"item_scale"});
  large.item_scale = 3.0;  // 84 px on an 80 px canvas
  expect_error<std::invalid_argument>([&] { make_dataset(large)->get(4); }, {"canvas"});

  DatasetSpec translated = cluttered;
  translated.kind = "translated";
  auto t = make_dataset(translated);
  EXPECT_TRUE(dynamic_cast<TranslatedDataset*>(t.get())->layout(4)->clutter.empty());

  DatasetSpec folder;
  folder.kind = "folder";
  folder.root = dir.file("folder");
  auto f = make_dataset(folder);
  EXPECT_EQ(f->channels(), 3);
  EXPECT_EQ(f->get(0)->image.at<cv::Vec3b>(0, 0), cv::Vec3b(3, 2, 1));
  folder.channels = 1;
  EXPECT_EQ(make_dataset(folder)->channels(), 1);

  DatasetSpec over_folder = folder;
  over_folder.kind = "translated";
  over_folder.base_kind = "folder";
  over_folder.canvas_size = 16;
  EXPECT_EQ(make_dataset(over_folder)->get(0)->image.size(), cv::Size(16, 16));
}

TEST(MakeDataset, UnknownKindOrMissingPathIsClear) {
  DatasetSpec spec;
  spec.kind = "imagenet";
  expect_error<std::invalid_argument>([&] { make_dataset(spec); }, {"kind", "imagenet"});
  spec.kind = "cluttered";
  spec.base_kind = "cluttered";
  expect_error<std::invalid_argument>([&] { make_dataset(spec); }, {"base_kind", "cluttered"});
  spec.kind = "idx";
  expect_error<std::invalid_argument>([&] { make_dataset(spec); }, {"images_path"});
  spec.kind = "folder";
  expect_error<std::invalid_argument>([&] { make_dataset(spec); }, {"root"});
}

TEST(FashionMnist, InstalledFilesLoad) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(dir + "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (Debian package dataset-fashion-mnist)";
  }
  DatasetSpec spec;
  spec.kind = "idx";
  spec.images_path = dir + "train-images-idx3-ubyte.gz";
  spec.labels_path = dir + "train-labels-idx1-ubyte.gz";
  auto train = make_dataset(spec);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(train->num_classes(), 10);
  spec.images_path = dir + "t10k-images-idx3-ubyte.gz";
  spec.labels_path = dir + "t10k-labels-idx1-ubyte.gz";
  auto test = make_dataset(spec);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->num_classes(), 10);
  std::vector<int> per_class(10, 0);
  for (int64_t i = 0; i < test->size(); ++i) per_class[test->get(i)->label]++;
  for (int count : per_class) EXPECT_EQ(count, 1000);  // the test set is balanced
  const auto first = test->get(0);
  EXPECT_EQ(first->image.size(), cv::Size(28, 28));
  EXPECT_GT(cv::countNonZero(first->image), 100);  // a real garment, not zeros
  EXPECT_EQ(first->label, 9);                      // the first test item is an ankle boot
}

}  // namespace
}  // namespace saccade::data
