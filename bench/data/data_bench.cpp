#include "bench/data/data_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <ostream>
#include <random>
#include <stdexcept>

#include "bench/data/generated_images.h"
#include "common/config.h"
#include "common/file_bytes.h"
#include "common/seconds_since.h"
#include "dataloader/augment.h"
#include "dataloader/image_decode.h"
#include "kernels/integral_image.h"
#include "schemas/wire.h"
#include "workers/data_plane/batch_codec.h"
#include "workers/job_options/data_options.h"

namespace saccade::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Seconds per image of each stage, summed over a set of images.
struct Stages {
  double read = 0, decode = 0, table = 0, cut = 0, augment = 0, encode = 0, send = 0;
  double receive = 0;  // the learner's host side: validate the frame, read the batch out of it
};

struct SetRow {
  std::string name;
  int images = 0;
  double megapixels = 0, file_kb = 0;  // means
  Stages per_image;                    // seconds
  double frame_bytes_per_image = 0;
  double decode_only_per_second = 0, pipeline_per_second = 0;
  double receive_per_second = 0;  // images one learner host thread takes in (receive alone)
};

// The stages over `paths`, one image at a time on this thread; every `batch` images are
// encoded into one frame and sent through `push` to `pull` (ZeroMQ's I/O threads move it).
SetRow measure_set(const std::string& name, const std::vector<fs::path>& paths,
                   const JobConfig& config, bool learner_cuts, int batch, zmq::socket_t& push,
                   zmq::socket_t& pull) {
  SetRow row;
  row.name = fmt::format("{}, {} cuts", name, learner_cuts ? "learner" : "data");
  data::ViewOptions augmented = job_options::view_options(config);
  augmented.cut_on_learner = learner_cuts;
  augmented.augment = true;
  const int views_per_image = 4 + augmented.local_views;  // 2 global, L local, 2 sequences
  // Frames of `slots` images; images after the last full frame are not encoded or sent.
  const int slots = static_cast<int>(std::min<size_t>(static_cast<size_t>(batch), paths.size()));
  data::SslBatch views;
  views.allocate(augmented, slots);
  Stages total;
  double frame_bytes = 0;
  int frames = 0;
  int64_t slot = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    auto start = Clock::now();
    const std::string bytes = read_file_bytes(paths[i]);
    total.read += seconds_since(start);
    start = Clock::now();
    std::string why;
    const cv::Mat image = data::decode_image(bytes.data(), bytes.size(), augmented.channels,
                                             config.data.max_image_pixels, &why);
    total.decode += seconds_since(start);
    if (image.empty()) throw std::runtime_error(paths[i].string() + ": " + why);
    row.megapixels += image.rows * static_cast<double>(image.cols) / 1e6;
    row.file_kb += static_cast<double>(bytes.size()) / 1024;
    // Every stage below is timed warm (after an untimed call), as a loader thread runs.
    const kernels::ImageView pixels{image.data, image.rows, image.cols, image.channels(),
                                    static_cast<ptrdiff_t>(image.step)};
    if (!learner_cuts) {  // a learner that cuts builds the table itself
      kernels::IntegralImage::build(pixels, 1);
      start = Clock::now();
      kernels::IntegralImage::build(pixels, 1);
      total.table += seconds_since(start);
    }
    // make_ssl_views builds its own table (data side) and draws every view's augmentation:
    // cut = its time - the build - the draws, the draws timed alone. Each is the fastest of
    // 3 calls, so that a difference of two timings is not a difference of two noises.
    double whole = 1e30, draws = 1e30;
    data::make_ssl_views(augmented, image, i, slot, views);
    for (int repeat = 0; repeat < 3; ++repeat) {
      start = Clock::now();
      data::make_ssl_views(augmented, image, i, slot, views);
      whole = std::min(whole, seconds_since(start));
      std::mt19937_64 rng(i);
      start = Clock::now();
      for (int v = 0; v < views_per_image; ++v)
        data::draw_view_augment({}, augmented.channels, augmented.patch_size, rng);
      draws = std::min(draws, seconds_since(start));
    }
    total.cut += whole - draws;
    total.augment += draws;
    views.indices[static_cast<size_t>(slot)] = static_cast<int64_t>(i);
    if (++slot < slots) continue;
    slot = 0;
    start = Clock::now();
    capnp::MallocMessageBuilder builder;
    wire::Envelope::Builder envelope =
        wire::start_envelope(builder, {"bench", wire::Role::DATA, 0, "local"}, 0, 0);
    data_plane::write_batch(views, 0, {-1, -1}, envelope.getBody().initBatch());
    zmq::message_t frame = wire::to_zmq(builder);
    total.encode += seconds_since(start);
    const size_t frame_size = frame.size();
    frame_bytes += static_cast<double>(frame_size);
    start = Clock::now();
    push.send(frame, zmq::send_flags::none);
    zmq::message_t received;
    if (!pull.recv(received)) throw std::runtime_error("send: no frame came back");
    total.send += seconds_since(start);
    // As a learner's link takes a frame (wire::open_frame) and its batch source reads it.
    start = Clock::now();
    wire::Received opened = wire::open_frame(std::move(received), {"bench", frame_size});
    if (!opened.message) throw std::runtime_error("receive: frame refused: " + opened.why);
    auto received_frame = std::make_shared<const wire::Message>(std::move(*opened.message));
    if (!data_plane::read_batch(received_frame->envelope().getBody().getBatch(), augmented, slots,
                                why, received_frame))
      throw std::runtime_error("receive: batch refused: " + why);
    total.receive += seconds_since(start);
    ++frames;
  }
  total.cut -= total.table;  // the build make_ssl_views did (data side), measured alone above
  const auto n = static_cast<double>(paths.size());
  row.images = static_cast<int>(paths.size());
  row.megapixels /= n;
  row.file_kb /= n;
  const double sent = static_cast<double>(frames) * slots;  // images encoded and sent
  row.per_image = {total.read / n,    total.decode / n,    total.table / n,   total.cut / n,
                   total.augment / n, total.encode / sent, total.send / sent, total.receive / sent};
  row.frame_bytes_per_image = frame_bytes / sent;
  const Stages& s = row.per_image;
  row.decode_only_per_second = 1 / (s.read + s.decode);
  row.pipeline_per_second =
      1 / (s.read + s.decode + s.table + s.cut + s.augment + s.encode + s.send);
  row.receive_per_second = 1 / s.receive;
  return row;
}

}  // namespace

int run_data_bench(const DataBenchOptions& o, std::ostream& out) {
  if (o.batch < 1) throw std::invalid_argument("--batch: expected >= 1");
  if (o.generated < 0 || o.generated_width < 16 || o.generated_height < 16)
    throw std::invalid_argument("--generated >= 0 images of at least 16 x 16 expected");
  const JobConfig config = load_config(o.config_path);
  std::vector<std::pair<std::string, std::vector<fs::path>>> sets;
  const fs::path scratch =
      fs::temp_directory_path() / fmt::format("saccade-bench-data-{}", ::getpid());
  if (o.generated > 0) {
    fs::create_directories(scratch);
    const std::vector<fs::path> paths = write_generated_folder(
        scratch, o.generated, /*classes=*/1, o.generated_width, o.generated_height);
    sets.emplace_back(fmt::format("generated {}x{}", o.generated_width, o.generated_height), paths);
  }
  std::vector<fs::path> photos(o.photos.begin(), o.photos.end());
  if (photos.empty() && o.default_photos && fs::is_directory("/usr/share/backgrounds")) {
    for (const auto& e : fs::directory_iterator("/usr/share/backgrounds"))
      if (e.path().extension() == ".jpg") photos.push_back(e.path());
    std::sort(photos.begin(), photos.end());
    if (static_cast<int>(photos.size()) > o.max_photos) photos.resize(o.max_photos);
  }
  if (!photos.empty()) sets.emplace_back("photos", photos);
  if (sets.empty()) throw std::invalid_argument("no images: --generated 0 and no photos");

  zmq::context_t context(1);
  zmq::socket_t pull(context, zmq::socket_type::pull), push(context, zmq::socket_type::push);
  pull.bind(o.send_endpoint);
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  std::vector<SetRow> rows;
  try {
    for (const auto& [name, paths] : sets) {
      for (const bool learner_cuts : {false, true})
        rows.push_back(measure_set(name, paths, config, learner_cuts, o.batch, push, pull));
    }
  } catch (...) {
    fs::remove_all(scratch);
    throw;
  }
  fs::remove_all(scratch);

  out << fmt::format(
      "bench data: {} ({} tokens per glimpse, {} glimpses, {} local views), "
      "batch {}, one core; ms per image\n",
      o.config_path,
      config.views.multizoom_patches + config.views.fovea_grid * config.views.fovea_grid,
      config.views.glimpses, config.views.local_views, o.batch);
  out << fmt::format(
      "{:<34} {:>6} {:>6} {:>7}  {:>6} {:>7} {:>6} {:>6} {:>8} {:>7} {:>6}  {:>10} "
      "{:>11} {:>7} {:>9}  {:>7} {:>10}\n",
      "images", "count", "MP", "KB", "read", "decode", "table", "cut", "augment", "encode", "send",
      "decode/s", "pipeline/s", "share", "MB/image", "receive", "receive/s");
  for (const SetRow& r : rows) {
    const Stages& s = r.per_image;
    out << fmt::format(
        "{:<34} {:>6} {:>6.2f} {:>7.1f}  {:>6.2f} {:>7.2f} {:>6.2f} {:>6.2f} {:>8.2f} {:>7.2f} "
        "{:>6.2f}  {:>10.1f} {:>11.1f} {:>6.1f}% {:>9.2f}  {:>7.2f} {:>10.1f}\n",
        r.name, r.images, r.megapixels, r.file_kb, 1e3 * s.read, 1e3 * s.decode, 1e3 * s.table,
        1e3 * s.cut, 1e3 * s.augment, 1e3 * s.encode, 1e3 * s.send, r.decode_only_per_second,
        r.pipeline_per_second, 100 * r.pipeline_per_second / r.decode_only_per_second,
        r.frame_bytes_per_image / 1e6, 1e3 * s.receive, r.receive_per_second);
  }
  out << "data cuts: cut = the integral-image cut of every view, rounded to uint8; learner "
         "cuts: the views' geometry and the shipped image (downscaled to views.ship_max_side), "
         "the table and the cut left to the learner. augment = drawing each view's "
         "augmentation (applied on the learner). send is ZeroMQ over loopback to a receiver "
         "in this process; share: the pipeline's images/s over decoding alone. receive (not "
         "in the pipeline: the learner's host thread) = validating the frame and reading the "
         "batch out of it, as a learner does\n";
  if (!o.json_path.empty()) {
    nlohmann::ordered_json j = {
        {"config", o.config_path}, {"batch", o.batch}, {"rows", nlohmann::ordered_json::array()}};
    for (const SetRow& r : rows) {
      const Stages& s = r.per_image;
      j["rows"].push_back({{"images", r.name},
                           {"count", r.images},
                           {"megapixels", r.megapixels},
                           {"file_kb", r.file_kb},
                           {"ms_per_image",
                            {{"read", 1e3 * s.read},
                             {"decode", 1e3 * s.decode},
                             {"table", 1e3 * s.table},
                             {"cut", 1e3 * s.cut},
                             {"augment", 1e3 * s.augment},
                             {"encode", 1e3 * s.encode},
                             {"send", 1e3 * s.send},
                             {"receive", 1e3 * s.receive}}},
                           {"decode_only_per_second", r.decode_only_per_second},
                           {"pipeline_per_second", r.pipeline_per_second},
                           {"receive_per_second", r.receive_per_second},
                           {"bytes_per_image", r.frame_bytes_per_image}});
    }
    write_file_bytes(o.json_path, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace saccade::bench
