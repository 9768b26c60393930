// A data::SslBatch as a wire::Batch message and back. The receiver trusts
// nothing: every tensor's name, dtype, shape and byte size is checked against
// the views it expects before a byte is copied, and a bad message is refused
// with a reason naming the tensor (the caller drops it), never a crash.
//
// Tensors (little-endian, row-major): for each view set V of teacher_global,
// student_global, student_local, teacher_seq, student_seq: "V.pixels" uint8
// [N, T, C, P, P], "V.positions" float32 [N, T, 3] and "V.augment" float32
// [A, kViewAugmentFloats] (data::PixelViews); then "labels" and "indices",
// int64 [B]. A view's augmentation must decode (data::decode_view_augment).
// Torch-free: data actors run without LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dataloader/augment.h"
#include "dataloader/sharded_sampler.h"
#include "dataloader/views.h"
#include "schemas/messages.capnp.h"

namespace saccade::data_plane {

// Bytes of the frame carrying a batch of `images` images (tensor data plus a
// bound on the envelope around it), to keep requests under the frame limit.
size_t batch_frame_bytes(const data::ViewOptions& views, int64_t images);

// Why a batch of `images` images, `what` ("a batch of 128 images", ...), cannot travel in
// frames of at most `limit` bytes (cluster.max_message_bytes), with the keys that would
// make it fit; "" when it fits. When the learner cuts, frames are bounded by images at
// views.ship_max_side.
std::string frame_limit_problem(const data::ViewOptions& views, int64_t images, size_t limit,
                                const std::string& what);

// Bytes of the tensor data `batch` carries on the wire (its frame, less the envelope).
size_t batch_payload_bytes(const data::SslBatch& batch);

// Fills `out` with `batch`, its id and the data position after it. Large tensors are
// referenced, not copied: `batch` must outlive the message `out` belongs to.
void write_batch(const data::SslBatch& batch, uint64_t batch_id, data::DataPosition position,
                 wire::Batch::Builder out);

// The batch in `in`, or nullopt with `why` set when it is not exactly a batch
// of `expected_images` images cut with `views`. Given `frame`, what keeps `in`'s bytes
// alive (the received wire::Message), the batch reads its pixels and shipped images in
// place and keeps `frame` alive while it needs them; otherwise it copies them. In place is
// what a learner does: the pixels are 2 MB per image at the paper's views, and a copy into
// fresh buffers cost it about 1 ms per image (`saccade bench data`, docs/data.md).
std::optional<data::SslBatch> read_batch(wire::Batch::Reader in, const data::ViewOptions& views,
                                         int64_t expected_images, std::string& why,
                                         std::shared_ptr<const void> frame = nullptr);

}  // namespace saccade::data_plane
