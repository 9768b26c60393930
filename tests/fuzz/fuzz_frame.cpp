// A frame from the network, as every process receives one: wire::open_frame (segment
// table, traversal limits, version, job), then what reads a body's contents further: a
// batch (data_plane::read_batch, in place and copied, either cut side), a checkpoint
// chunk (control::CheckpointAssembler), a checkpoint request (control::read_query), a
// rendezvous store request (control::RendezvousStore) and a status reply (what `saccade
// status` prints of it). Whatever the bytes, no crash and no sanitizer report; a batch read
// is whole, and the status as JSON is JSON.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "control/checkpoint_transfer.h"
#include "control/rendezvous_store.h"
#include "coordinator/status.h"
#include "dataloader/augment.h"
#include "schemas/wire.h"
#include "tests/fuzz/fuzz_inputs.h"
#include "workers/data_plane/batch_codec.h"

namespace {

using namespace saccade;

// Every view set holds the rows and bytes its views promise.
void check_whole(const data::SslBatch& b, const data::ViewOptions& views) {
  for (const data::PixelViews* p :
       {&b.teacher_global, &b.student_global, &b.student_local, &b.teacher_seq, &b.student_seq}) {
    const size_t tokens = static_cast<size_t>(p->views * p->tokens);
    const size_t augmented = static_cast<size_t>(p->augmented_views());
    if (p->channels != views.channels || p->patch_size != views.patch_size) std::abort();
    if (p->positions.size() != tokens * 3 ||
        p->augment.size() != augmented * data::kViewAugmentFloats)
      std::abort();
    if (b.cut_on_learner() ? p->boxes.size() != tokens * 4
                           : p->pixels.size() != tokens * static_cast<size_t>(p->patch_bytes()))
      std::abort();
  }
  if (b.labels.size() != static_cast<size_t>(b.batch_size) ||
      b.indices.size() != static_cast<size_t>(b.batch_size))
    std::abort();
  for (const data::ShippedImage& image : b.images) {
    const size_t row = static_cast<size_t>(image.width) * static_cast<size_t>(views.channels);
    if (image.pixels.size() < row * static_cast<size_t>(image.height)) std::abort();
  }
}

void read_body(const std::shared_ptr<const wire::Message>& message) {
  const wire::Envelope::Body::Reader body = message->envelope().getBody();
  switch (message->kind()) {
    case wire::Envelope::Body::BATCH:
      for (const bool learner_cuts : {false, true}) {
        const data::ViewOptions views = fuzz::batch_views(learner_cuts);
        std::string why;
        if (auto b = data_plane::read_batch(body.getBatch(), views, fuzz::kBatchImages, why))
          check_whole(*b, views);
        if (auto b =
                data_plane::read_batch(body.getBatch(), views, fuzz::kBatchImages, why, message))
          check_whole(*b, views);
      }
      break;
    case wire::Envelope::Body::CHECKPOINT_CHUNK: {
      control::CheckpointAssembler assembler;
      if (assembler.add(body.getCheckpointChunk(), fuzz::kMaxFrameBytes).empty())
        (void)assembler.complete(assembler.bytes());
      break;
    }
    case wire::Envelope::Body::CHECKPOINT_REQUEST:
      (void)control::describe(control::read_query(body.getCheckpointRequest()));
      break;
    case wire::Envelope::Body::STORE_REQUEST: {
      const wire::StoreRequest::Reader request = body.getStoreRequest();
      control::StoreQuery query;
      try {
        query = control::read_store_request(request);
      } catch (const std::invalid_argument&) {
        break;  // refused, naming what is wrong
      }
      control::RendezvousStore store;
      (void)store.apply("a:learner/0", request.getId(), request.getGeneration(), query, 0);
      (void)store.expire(int64_t{1} << 62);
      break;
    }
    case wire::Envelope::Body::STATUS_REPLY: {
      const coordinator::JobStatus status = coordinator::read_status(body.getStatusReply());
      (void)coordinator::status_table(status);
      (void)coordinator::status_prometheus(status);
      if (!nlohmann::json::accept(coordinator::status_json(status))) std::abort();
      break;
    }
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zmq::message_t frame(data, size);
  wire::Received received =
      wire::open_frame(std::move(frame), {fuzz::kJobId, fuzz::kMaxFrameBytes});
  if (received.status == wire::RecvStatus::kOk) {
    if (!received.message) std::abort();
    read_body(std::make_shared<const wire::Message>(std::move(*received.message)));
  } else if (received.why.empty()) {
    std::abort();  // a refusal says why
  }
  return 0;
}
