#include "dataloader/tar_shard_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "dataloader/dataset_factory.h"
#include "dataloader/image_folder_dataset.h"
#include "dataloader/ssl_loader.h"
#include "dataloader/tar_index.h"
#include "dataloader/tar_pack.h"
#include "tests/dataloader/expect_error.h"
#include "tests/dataloader/small_views.h"
#include "tests/dataloader/temp_dir.h"

namespace saccade::data {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

cv::Mat pattern(int rows, int cols, int seed) {
  cv::Mat image(rows, cols, CV_8UC3);
  cv::RNG rng(static_cast<uint64_t>(seed) + 1);
  rng.fill(image, cv::RNG::UNIFORM, 0, 256);
  return image;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

void run(const std::string& command) {
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// dir/files: 000.png + 000.cls (label 2), 001.jpg + 001.cls (label 0), 002.png unlabeled,
// 003.cls alone (no image), and a PNG with a name over 100 characters (label 1).
struct Members {
  TempDir dir;
  fs::path files = dir.path() / "files";
  std::string long_key = "deep/" + std::string(110, 'k');
  Members() {
    fs::create_directories(files / "deep");
    cv::imwrite((files / "000.png").string(), pattern(12, 20, 0));
    write_text(files / "000.cls", "2");
    cv::imwrite((files / "001.jpg").string(), pattern(30, 9, 1));
    write_text(files / "001.cls", "0\n");
    cv::imwrite((files / "002.png").string(), pattern(5, 6, 2));
    write_text(files / "003.cls", "1");
    cv::imwrite((files / (long_key + ".png")).string(), pattern(7, 7, 3));
    write_text(files / (long_key + ".cls"), "1");
  }
  std::string list() const {
    return "000.png 000.cls 001.jpg 001.cls 002.png 003.cls " + long_key + ".png " + long_key +
           ".cls";
  }
  cv::Mat decoded(const std::string& name) const {
    cv::Mat bgr = cv::imread((files / name).string(), cv::IMREAD_COLOR);
    cv::Mat rgb;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    return rgb;
  }
};

void expect_same_image(const cv::Mat& a, const cv::Mat& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.type(), b.type());
  EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0.0);
}

void expect_members_read_back(const Members& m, const std::string& tar) {
  TarShardDataset dataset({tar, 3});
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_EQ(dataset.skipped_without_image(), 1);
  EXPECT_EQ(dataset.num_classes(), 3);  // largest label + 1 without classes.txt
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"000.png", 2}, {"001.jpg", 0}, {"002.png", -1}, {m.long_key + ".png", 1}};
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    const auto sample = dataset.get(static_cast<int64_t>(i));
    ASSERT_TRUE(sample);
    EXPECT_EQ(sample->label, want[i].second);
    EXPECT_EQ(sample->source, tar + ":" + want[i].first);
    expect_same_image(sample->image, m.decoded(want[i].first));
  }
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 0);
}

TEST(TarShardDataset, ReadsGnuTarInGnuAndPaxFormats) {
  Members m;
  for (const std::string format : {"gnu", "pax", "ustar"}) {
    SCOPED_TRACE(format);
    const std::string tar = (m.dir.path() / (format + ".tar")).string();
    if (format == "ustar") {
      // ustar cannot hold the long name: split it over prefix and name instead.
      run("cd " + m.files.string() + " && tar --format=ustar -cf " + tar +
          " 000.png 000.cls 001.jpg 001.cls 002.png 003.cls 2>/dev/null");
      TarShardDataset dataset({tar, 3});
      EXPECT_EQ(dataset.size(), 3);
      continue;
    }
    run("cd " + m.files.string() + " && tar --format=" + format + " -cf " + tar + " " + m.list());
    expect_members_read_back(m, tar);
  }
}

TEST(TarShardDataset, ReadsPythonTarfileInPaxAndGnuFormats) {
  Members m;
  for (const std::string format : {"PAX_FORMAT", "GNU_FORMAT"}) {
    SCOPED_TRACE(format);
    const std::string tar = (m.dir.path() / (format + ".tar")).string();
    run("cd " + m.files.string() +
        " && python3 -c \"import sys, tarfile\n"
        "with tarfile.open(sys.argv[1], 'w', format=tarfile." +
        format +
        ") as t:\n"
        "    [t.add(n) for n in sys.argv[2:]]\" " +
        tar + " " + m.list());
    expect_members_read_back(m, tar);
  }
}

// A pax header ('x') whose first record is good and whose next records are malformed: a
// length that would wrap the parse offset back to the start (an endless loop once), a signed
// length, a length not ending on '\n'. The good record applies; the rest is ignored.
TEST(TarShardDataset, MalformedPaxRecordsEndTheHeaderWithoutLoopingOrReadingPastIt) {
  TempDir dir;
  const std::string tar = (dir.path() / "pax.tar").string();
  run("python3 -c \"import io, sys, tarfile\n"
      "good = b'16 path=key.png\\n'\n"
      "bodies = [good + str(2**64 - len(good)).encode() + b' x\\n',\n"
      "          good + b'-3 size=1\\n', good + b'12 size=1\\n\\n', good + b'2 \\n']\n"
      "with tarfile.open(sys.argv[1], 'w', format=tarfile.USTAR_FORMAT) as t:\n"
      "    for i, body in enumerate(bodies):\n"
      "        x = tarfile.TarInfo('pax'); x.type = tarfile.XHDTYPE; x.size = len(body)\n"
      "        t.addfile(x, io.BytesIO(body))\n"
      "        f = tarfile.TarInfo('plain'); f.size = 3 + i\n"
      "        t.addfile(f, io.BytesIO(bytes(3 + i)))\" " +
      tar);
  const auto members = scan_tar(tar);
  ASSERT_EQ(members.size(), 4u);
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(members[i].name, "key.png") << i;
    EXPECT_EQ(members[i].size, 3 + i) << i;  // the header's own size: no "size" record held
  }
}

// root/ant: a.png, b.jpg; root/bee: c.png, d.jpeg, e.png.
struct Folder {
  TempDir dir;
  std::string root = (dir.path() / "root").string();
  std::string out = (dir.path() / "shards").string();
  Folder() {
    fs::create_directories(root + "/ant");
    fs::create_directories(root + "/bee");
    cv::imwrite(root + "/ant/a.png", pattern(10, 14, 10));
    cv::imwrite(root + "/ant/b.jpg", pattern(16, 8, 11));
    cv::imwrite(root + "/bee/c.png", pattern(9, 9, 12));
    cv::imwrite(root + "/bee/d.jpeg", pattern(20, 31, 13));
    cv::imwrite(root + "/bee/e.png", pattern(3, 40, 14));
  }
};

TEST(TarShardDataset, PackThenReadEqualsTheFolderImageForImage) {
  Folder f;
  const PackResult packed = pack_image_folder({f.root, f.out, 2, "train"});
  EXPECT_EQ(packed.samples, 5);
  ASSERT_EQ(packed.shards.size(), 3u);
  EXPECT_EQ(fs::path(packed.shards[0]).filename(), "train-000000.tar");
  EXPECT_TRUE(fs::exists(packed.shards[0] + ".idx"));
  ImageFolderDataset folder({f.root, 3});
  TarShardDataset shards({f.out, 3});
  EXPECT_EQ(shards.class_names(), folder.class_names());
  EXPECT_EQ(shards.num_classes(), 2);
  ASSERT_EQ(shards.size(), folder.size());
  for (int64_t i = 0; i < folder.size(); ++i) {
    SCOPED_TRACE(i);
    const auto a = folder.get(i);
    const auto b = shards.get(i);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->label, b->label);
    expect_same_image(a->image, b->image);
  }
  // GNU tar reads what pack wrote.
  run("tar -tf " + packed.shards[0] + " > " + f.out + "/list.txt");
  std::ifstream list(f.out + "/list.txt");
  std::string all((std::istreambuf_iterator<char>(list)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "000000000.png\n000000000.cls\n000000001.jpg\n000000001.cls\n");
  expect_error<std::invalid_argument>(
      [&] {
        pack_image_folder({f.root, f.out, 2, "train"});
      },
      {f.out, "already holds shards"});
  expect_error<std::invalid_argument>(
      [&] {
        pack_image_folder({f.root, f.out + "2", 0, "x"});
      },
      {"--shard-size"});
}

TEST(TarShardDataset, ACorruptImageMemberIsSkippedAndCounted) {
  Members m;
  std::vector<unsigned char> noise(2000, 0x42);
  write_bytes((m.files / "001.jpg").string(), noise);  // not a JPEG any more
  write_text(m.files / "002.cls", "banana");           // not a label
  const std::string tar = (m.dir.path() / "c.tar").string();
  run("cd " + m.files.string() + " && tar -cf " + tar + " " + m.list() + " 002.cls");
  TarShardDataset dataset({tar, 3});
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_TRUE(dataset.get(0));
  EXPECT_FALSE(dataset.get(1));
  EXPECT_FALSE(dataset.get(1));  // counted once
  EXPECT_FALSE(dataset.get(2));
  EXPECT_EQ(dataset.stats().skipped_corrupt(), 2);
  EXPECT_EQ(dataset.stats().skipped_paths(),
            (std::vector<std::string>{tar + ":001.jpg", tar + ":002.png"}));
  EXPECT_EQ(get_or_next_good(dataset, 1).source, tar + ":" + m.long_key + ".png");
}

// Members over data.max_image_pixels are skipped and counted like corrupt ones: 000.png
// (20 x 12, decoded by OpenCV) and 001.jpg (9 x 30, refused from its header) over 200.
TEST(TarShardDataset, ImagesOverThePixelLimitAreSkippedAndCounted) {
  Members m;
  const std::string tar = (m.dir.path() / "big.tar").string();
  run("cd " + m.files.string() + " && tar -cf " + tar + " " + m.list());
  TarShardDataset dataset({tar, 3, 200});
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_FALSE(dataset.get(0));
  EXPECT_FALSE(dataset.get(1));
  EXPECT_TRUE(dataset.get(2));
  EXPECT_TRUE(dataset.get(3));
  EXPECT_EQ(dataset.stats().skipped_paths(),
            (std::vector<std::string>{tar + ":000.png", tar + ":001.jpg"}));
}

TEST(TarShardDataset, TruncatedAndNonTarFilesAreRefusedWithPathAndOffset) {
  Members m;
  const std::string tar = (m.dir.path() / "whole.tar").string();
  run("cd " + m.files.string() + " && tar -cf " + tar + " 000.png 000.cls 001.jpg");
  const auto bytes = read_bytes(tar);
  const auto members = scan_tar(tar);
  ASSERT_EQ(members.size(), 3u);
  // Cut inside 001.jpg's data: its header (512 bytes before the data) promises more.
  const std::string cut = (m.dir.path() / "cut.tar").string();
  write_bytes(cut, {bytes.begin(), bytes.begin() + static_cast<long>(members[2].offset + 10)});
  expect_error<std::runtime_error>(
      [&] {
        TarShardDataset({cut, 3});
      },
      {cut, "offset " + std::to_string(members[2].offset - 512), "truncated"});
  // Cut at a member boundary: no end-of-archive block.
  const std::string boundary = (m.dir.path() / "boundary.tar").string();
  write_bytes(boundary,
              {bytes.begin(), bytes.begin() + static_cast<long>(members[2].offset - 512)});
  expect_error<std::runtime_error>(
      [&] {
        TarShardDataset({boundary, 3});
      },
      {boundary, "offset " + std::to_string(members[2].offset - 512)});
  const std::string text = (m.dir.path() / "notes.tar").string();
  write_text(text, std::string(2000, 'x'));
  expect_error<std::runtime_error>(
      [&] {
        TarShardDataset({text, 3});
      },
      {text, "offset 0", "not a tar"});
  expect_error<std::invalid_argument>(
      [&] {
        TarShardDataset({(m.dir.path() / "none-*.tar").string(), 3});
      },
      {"none-*.tar"});
}

TEST(TarShardDataset, TheIndexIsReusedAndRebuiltWhenTheShardChanges) {
  Members m;
  const std::string tar = (m.dir.path() / "s.tar").string();
  run("cd " + m.files.string() + " && tar -cf " + tar + " 000.png 000.cls");
  bool rebuilt = false;
  EXPECT_EQ(load_tar_index(tar, &rebuilt).size(), 2u);
  EXPECT_TRUE(rebuilt);
  struct stat first {};
  ASSERT_EQ(::stat(tar_index_path(tar).c_str(), &first), 0);
  EXPECT_EQ(load_tar_index(tar, &rebuilt), scan_tar(tar));
  EXPECT_FALSE(rebuilt);
  struct stat second {};
  ASSERT_EQ(::stat(tar_index_path(tar).c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino);  // not rewritten (a rewrite renames a new file)
  run("cd " + m.files.string() + " && tar -rf " + tar + " 001.jpg 001.cls");
  EXPECT_EQ(load_tar_index(tar, &rebuilt).size(), 4u);
  EXPECT_TRUE(rebuilt);
  EXPECT_EQ(TarShardDataset({tar, 3}).size(), 2);
  // A damaged index is rebuilt rather than trusted.
  write_text(tar_index_path(tar), "garbage\n");
  EXPECT_EQ(load_tar_index(tar, &rebuilt).size(), 4u);
  EXPECT_TRUE(rebuilt);
  // So is one whose header still names this tar but whose member runs past its end, also
  // where offset + size wraps around 2^64 (found by tests/fuzz/fuzz_tar_index).
  std::string header;
  std::getline(std::ifstream(tar_index_path(tar)), header);
  for (const std::string member :
       {"18446744073709551615 2 - x.png", "512 99999999 - x.png", "-1 2 - x.png"}) {
    write_text(tar_index_path(tar), header + "\n" + member + "\n");
    EXPECT_EQ(load_tar_index(tar, &rebuilt), scan_tar(tar)) << member;
    EXPECT_TRUE(rebuilt) << member;
  }
}

// An index that cannot be written (a read-only folder; as root, who writes anywhere, a
// directory standing where the index file would go) is kept in memory: the shard still reads.
TEST(TarShardDataset, AReadOnlyFolderKeepsTheIndexInMemory) {
  Members m;
  const fs::path ro = m.dir.path() / "ro";
  fs::create_directories(ro);
  const std::string tar = (ro / "s.tar").string();
  run("cd " + m.files.string() + " && tar -cf " + tar + " 000.png 000.cls");
  const bool root = ::geteuid() == 0;
  if (root) {
    fs::create_directories(tar_index_path(tar));
  } else {
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  }
  EXPECT_EQ(TarShardDataset({tar, 3}).size(), 1);
  EXPECT_FALSE(fs::is_regular_file(tar_index_path(tar)));
  fs::permissions(ro, fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(ro))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
}

TEST(TarShardDataset, ResumingTheLoaderContinuesExactlyAsAnUninterruptedRun) {
  Folder f;
  for (int i = 0; i < 12; ++i) {
    cv::imwrite(f.root + "/ant/x" + std::to_string(10 + i) + ".png",
                pattern(8 + i, 30 - i, 20 + i));
  }
  pack_image_folder({f.root, f.out, 4, "shard"});
  DatasetSpec spec;
  spec.kind = "shards";
  spec.shards = f.out + "/shard-*.tar";
  const std::shared_ptr<const Dataset> ds = make_dataset(spec);
  ASSERT_EQ(ds->size(), 17);
  const auto take = [&](DataPosition start, int n) {
    SslLoader loader(ds, {ds->size(), 2, 1, 5, true, false}, start, testing::small_views(),
                     {3, 2, 2, 42});
    std::vector<LoadedBatch> out;
    for (int i = 0; i < n; ++i) out.push_back(loader.next());
    return out;
  };
  const auto straight = take({0, 0}, 5);  // crosses an epoch (9 indices per rank)
  const auto resumed = take(straight[1].position, 3);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(straight[i + 2].batch->indices, resumed[i].batch->indices);
    EXPECT_EQ(straight[i + 2].batch->labels, resumed[i].batch->labels);
    EXPECT_EQ(straight[i + 2].batch->teacher_global.pixels,
              resumed[i].batch->teacher_global.pixels);
  }
}

}  // namespace
}  // namespace saccade::data
