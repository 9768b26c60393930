// Writes the seed inputs of the fuzz targets that cannot be had as files (scripts/fuzz.sh
// adds configs and tars made by GNU tar and Python): valid frames of each kind the frame
// target reads further, safetensors files and IDX files, gzipped or not.
//   fuzz_seeds DIR   ->   DIR/frame/*, DIR/safetensors/*, DIR/idx/*, DIR/image/*
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "common/file_bytes.h"
#include "control/checkpoint_transfer.h"
#include "control/rendezvous_store.h"
#include "coordinator/status.h"
#include "dataloader/idx_dataset.h"
#include "dataloader/image_decode.h"
#include "model/safetensors.h"
#include "schemas/wire.h"
#include "tests/fuzz/fuzz_inputs.h"
#include "workers/data_plane/batch_codec.h"

namespace {

using namespace saccade;
namespace fs = std::filesystem;

// One envelope of the fuzz job, its body filled by `fill`, flattened as it travels.
void write_frame(const fs::path& file,
                 const std::function<void(wire::Envelope::Body::Builder)>& fill) {
  capnp::MallocMessageBuilder builder;
  wire::Envelope::Builder envelope =
      wire::start_envelope(builder, {fuzz::kJobId, wire::Role::DATA, 0, "n0"}, 0, 0);
  fill(envelope.getBody());
  const zmq::message_t frame = wire::to_zmq(builder);
  write_file_bytes(file, std::string_view(frame.data<char>(), frame.size()));
}

void write_batch_frame(const fs::path& file, bool learner_cuts) {
  const data::ViewOptions views = fuzz::batch_views(learner_cuts);
  data::SslBatch batch;
  batch.allocate(views, fuzz::kBatchImages);
  for (int64_t b = 0; b < fuzz::kBatchImages; ++b) {
    cv::Mat image(40 + 7 * static_cast<int>(b), 60, CV_8UC3);
    cv::randu(image, 0, 256);
    data::make_ssl_views(views, image, 17 + static_cast<uint64_t>(b), b, batch);
    batch.labels[static_cast<size_t>(b)] = b;
    batch.indices[static_cast<size_t>(b)] = 5 + b;
  }
  write_frame(file, [&](wire::Envelope::Body::Builder body) {
    data_plane::write_batch(batch, 3, {0, 2}, body.initBatch());
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const fs::path dir = argv[1];
  for (const char* target : {"frame", "safetensors", "idx", "image"})
    fs::create_directories(dir / target);

  write_batch_frame(dir / "frame" / "batch-data-cuts", false);
  write_batch_frame(dir / "frame" / "batch-learner-cuts", true);
  const control::Blobs blobs = {{"student", std::string(300, 's')}, {"empty", ""}};
  int chunk = 0;
  control::for_each_chunk(blobs, 128, [&](const control::ChunkView& view) {
    write_frame(dir / "frame" / fmt::format("chunk-{}", chunk++),
                [&](wire::Envelope::Body::Builder body) {
                  control::write_chunk(4, view, body.initCheckpointChunk());
                });
  });
  write_frame(dir / "frame" / "checkpoint-request", [](wire::Envelope::Body::Builder body) {
    control::write_query({7, {"teacher", "optimizer"}, wire::CheckpointSource::INPUT_FILE},
                         body.initCheckpointRequest());
  });

  write_frame(dir / "frame" / "store-request", [](wire::Envelope::Body::Builder body) {
    control::StoreQuery query;
    query.op = wire::StoreOp::COMPARE_SET;
    query.keys = {"nccl-id"};
    query.value = "abc";
    control::write_store_request(9, 0, query, body.initStoreRequest());
  });
  write_frame(dir / "frame" / "status-reply", [](wire::Envelope::Body::Builder body) {
    coordinator::JobStatus status;
    status.job_id = fuzz::kJobId;
    status.stage = "pretrain";
    status.stages = {{"pretrain", "running", 12.5, 40}, {"probe", "pending", 0, -1}};
    status.state = "running";
    status.metrics = {{"loss", 6.5}, {"flop_per_image", 2.69e11}, {"mfu", 0.078}};
    status.actors = {{"learner", 0, "n0", 41, "running", 12, 1, 40, 250.0, false}};
    status.nodes = {{"n0", "10.0.0.1", 16, 1, 1ull << 37, "registered", 7}};
    coordinator::write_status(status, body.initStatusReply());
  });

  model::RawTensorMap tensors;
  tensors["blocks.0.weight"] = {model::DType::kF32, {2, 3}, std::string(24, '\1')};
  tensors["step"] = {model::DType::kI64, {}, std::string(8, '\0')};
  tensors["mask"] = {model::DType::kBool, {0, 4}, ""};
  tensors["scale"] = {model::DType::kBF16, {5}, std::string(10, '\7')};
  write_file_bytes(dir / "safetensors" / "tensors",
                   model::serialize_safetensors(tensors, {{"format", "pt"}, {"step", "12"}}));
  write_file_bytes(dir / "safetensors" / "empty", model::serialize_safetensors({}));

  std::vector<uint8_t> pixels(3 * 4 * 5);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37);
  for (const bool gzip : {false, true}) {
    data::write_idx_images((dir / "idx" / (gzip ? "images.gz" : "images")).string(), 3, 4, 5,
                           pixels, gzip);
  }

  // Small JPEGs, colour (4:2:0) and gray: the decoder's input at its smallest.
  cv::Mat colour(12, 20, CV_8UC3), gray(9, 7, CV_8UC1);
  cv::randu(colour, 0, 256);
  cv::randu(gray, 0, 256);
  for (const auto& [name, image] : {std::pair{"colour.jpg", colour}, std::pair{"gray.jpg", gray}}) {
    const std::vector<uint8_t> jpeg = data::encode_jpeg(image, 80);
    write_file_bytes(dir / "image" / name,
                     std::string_view(reinterpret_cast<const char*>(jpeg.data()), jpeg.size()));
  }
  return 0;
}
