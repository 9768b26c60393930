#include "workers/data_plane/batch_codec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/extract.h"
#include "kernels/integral_image.h"
#include "schemas/tensors.h"

namespace saccade::data_plane {

namespace {

// One tensor of a batch: what it is and where its bytes lie in an SslBatch.
template <class Byte>
struct TensorSlot {
  wire::TensorSpec spec;
  Byte* data;                      // not owned: a buffer of the batch
  size_t buffer_bytes;             // the buffer's size, >= the tensor's bytes
  ByteBuffer* borrower = nullptr;  // not owned: the batch's buffer, when it can borrow (uint8)
  bool word_padded = false;        // the buffer is the tensor, then zeros to a multiple of 8 bytes
};

// The five view sets of a batch with their wire names.
std::array<std::pair<const char*, const data::PixelViews*>, 5> views_of(const data::SslBatch& b) {
  return {{{"teacher_global", &b.teacher_global},
           {"student_global", &b.student_global},
           {"student_local", &b.student_local},
           {"teacher_seq", &b.teacher_seq},
           {"student_seq", &b.student_seq}}};
}

// The tensors of `batch` in wire order; `Batch` is SslBatch or const SslBatch.
template <class Batch>
auto slots_of(Batch& batch) {
  using Byte = std::conditional_t<std::is_const_v<Batch>, const std::byte, std::byte>;
  std::vector<TensorSlot<Byte>> slots;
  auto add = [&](std::string name, wire::DType dtype, std::vector<int64_t> shape, auto& values) {
    slots.push_back({{std::move(name), dtype, std::move(shape)},
                     reinterpret_cast<Byte*>(values.data()),
                     values.size() * sizeof(*values.data())});
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(values)>, ByteBuffer>)
      slots.back().borrower = &values;
  };
  const bool learner_cuts = batch.cut_on_learner();
  auto add_views = [&](const char* name, auto& views) {
    const int64_t n = views.views, t = views.tokens, c = views.channels, p = views.patch_size;
    if (learner_cuts) {
      add(fmt::format("{}.boxes", name), wire::DType::FLOAT32, {n, t, 4}, views.boxes);
    } else {
      add(fmt::format("{}.pixels", name), wire::DType::UINT8, {n, t, c, p, p}, views.pixels);
    }
    add(fmt::format("{}.positions", name), wire::DType::FLOAT32, {n, t, 3}, views.positions);
    add(fmt::format("{}.augment", name), wire::DType::FLOAT32,
        {views.augmented_views(), data::kViewAugmentFloats}, views.augment);
  };
  add_views("teacher_global", batch.teacher_global);
  add_views("student_global", batch.student_global);
  add_views("student_local", batch.student_local);
  add_views("teacher_seq", batch.teacher_seq);
  add_views("student_seq", batch.student_seq);
  add("labels", wire::DType::INT64, {batch.batch_size}, batch.labels);
  add("indices", wire::DType::INT64, {batch.batch_size}, batch.indices);
  for (size_t i = 0; i < batch.images.size(); ++i) {
    auto& image = batch.images[i];
    add(fmt::format("image.{}", i), wire::DType::UINT8,
        {image.height, image.width, batch.teacher_global.channels}, image.pixels);
    slots.back().word_padded = true;
  }
  return slots;
}

// The shape of tensor `name` in `list`, or nullopt when it is absent.
std::optional<std::vector<int64_t>> shape_of(capnp::List<wire::Tensor>::Reader list,
                                             const std::string& name) {
  for (wire::Tensor::Reader t : list) {
    if (t.getName() != name.c_str()) continue;
    std::vector<int64_t> shape;
    for (int64_t d : t.getShape()) shape.push_back(d);
    return shape;
  }
  return std::nullopt;
}

}  // namespace

size_t batch_frame_bytes(const data::ViewOptions& views, int64_t images) {
  data::SslBatch one;
  one.allocate(views, 1);
  if (one.cut_on_learner()) {  // bound by the largest image shipped
    one.images[0].height = one.images[0].width = views.ship_max_side;
  }
  size_t per_image = 0;
  for (const auto& slot : slots_of(std::as_const(one))) per_image += wire::tensor_bytes(slot.spec);
  constexpr size_t kEnvelope = 4096;  // header, names, shapes and list pointers
  return kEnvelope + per_image * static_cast<size_t>(images);
}

std::string frame_limit_problem(const data::ViewOptions& views, int64_t images, size_t limit,
                                const std::string& what) {
  const size_t frame = batch_frame_bytes(views, images);
  if (limit == 0 || frame <= limit) return "";
  const bool learner = views.cut_on_learner;
  return fmt::format(
      "cluster.max_message_bytes: {} needs frames of up to {} bytes{}, over the limit of {}: "
      "raise cluster.max_message_bytes to at least {}, or lower {}",
      what, frame,
      learner ? fmt::format(" (views.cut_on = \"learner\" ships images of up to "
                            "views.ship_max_side = {} pixels a side)",
                            views.ship_max_side)
              : "",
      limit, frame,
      learner ? "views.ship_max_side or the batch per learner (ssl.batch_size)"
              : "the batch per learner (ssl.batch_size)");
}

size_t batch_payload_bytes(const data::SslBatch& batch) {
  size_t bytes = 0;
  for (const auto& slot : slots_of(batch)) bytes += wire::tensor_bytes(slot.spec);
  return bytes;
}

void write_batch(const data::SslBatch& batch, uint64_t batch_id, data::DataPosition position,
                 wire::Batch::Builder out) {
  out.setBatchId(batch_id);
  out.setEpoch(position.epoch);
  out.setPosition(position.offset);
  out.setImages(static_cast<uint32_t>(batch.batch_size));
  out.setSkippedCorrupt(static_cast<uint32_t>(batch.skipped_corrupt));
  std::vector<wire::TensorOut> tensors;
  // Borrowed, not copied, where the buffer is readable to the next word (images are padded
  // to it): `batch` outlives the message that `out` belongs to.
  for (const auto& slot : slots_of(batch)) {
    const size_t word_end = (wire::tensor_bytes(slot.spec) + 7) / 8 * 8;
    tensors.push_back({slot.spec, slot.data, slot.buffer_bytes >= word_end});
  }
  wire::write_tensors(tensors, out.initTensors(static_cast<unsigned>(tensors.size())));
}

std::optional<data::SslBatch> read_batch(wire::Batch::Reader in, const data::ViewOptions& views,
                                         int64_t expected_images, std::string& why,
                                         std::shared_ptr<const void> frame) {
  if (in.getImages() != expected_images) {
    why = fmt::format("batch {}: {} images, expected {}", in.getBatchId(), in.getImages(),
                      expected_images);
    return std::nullopt;
  }
  data::SslBatch batch;
  batch.allocate(views, expected_images, /*pixel_buffers=*/frame == nullptr);
  batch.skipped_corrupt = in.getSkippedCorrupt();
  // Shipped images (the learner cuts): each "image.i" is [H, W, C], no side over the cap.
  for (size_t i = 0; i < batch.images.size(); ++i) {
    const std::string name = fmt::format("image.{}", i);
    const auto shape = shape_of(in.getTensors(), name);
    if (!shape) continue;  // read_tensors names it as missing
    const int64_t max_side = views.ship_max_side > 0 ? views.ship_max_side : kernels::kMaxImageSide;
    if (shape->size() != 3 || (*shape)[2] != views.channels || (*shape)[0] < 1 || (*shape)[1] < 1 ||
        (*shape)[0] > max_side || (*shape)[1] > max_side) {
      why = fmt::format("batch {}: \"{}\" has shape [{}], expected [H, W, {}] with sides in 1..{}",
                        in.getBatchId(), name, fmt::join(*shape, ", "), views.channels, max_side);
      return std::nullopt;
    }
    batch.images[i].height = static_cast<int>((*shape)[0]);
    batch.images[i].width = static_cast<int>((*shape)[1]);
    if (!frame)
      batch.images[i].pixels.assign(
          static_cast<size_t>((*shape)[0] * (*shape)[1] * views.channels + 7) / 8 * 8, 0);
  }
  const auto slots = slots_of(batch);
  std::vector<wire::TensorSpec> specs;
  for (const auto& slot : slots) specs.push_back(slot.spec);
  const auto data =
      wire::read_tensors(in.getTensors(), specs, fmt::format("batch {}", in.getBatchId()), why);
  if (!data) return std::nullopt;
  for (size_t i = 0; i < slots.size(); ++i) {
    const size_t bytes = wire::tensor_bytes(slots[i].spec);
    // A word-padded buffer borrows the padding too: Cap'n Proto stores a blob in whole words.
    if (frame && slots[i].borrower)
      slots[i].borrower->borrow(reinterpret_cast<const uint8_t*>((*data)[i]),
                                slots[i].word_padded ? (bytes + 7) / 8 * 8 : bytes, frame);
    else if (bytes > 0)
      std::memcpy(slots[i].data, (*data)[i], bytes);
  }
  // Each view's augmentation must be one the data plane could have drawn, and each box
  // one the learner's cut accepts.
  for (const auto& [name, set] : views_of(batch)) {
    if (!set->boxes.empty()) {
      std::vector<kernels::CropBox> boxes(set->boxes.size() / 4);
      for (size_t i = 0; i < boxes.size(); ++i) {
        const float* b = set->boxes.data() + 4 * i;
        boxes[i] = {b[0], b[1], b[2], b[3], 0};
      }
      try {
        kernels::validate_crops(boxes, 1, static_cast<int>(set->patch_size));
      } catch (const std::invalid_argument& e) {
        why = fmt::format("batch {}: \"{}.boxes\": {}", in.getBatchId(), name, e.what());
        return std::nullopt;
      }
    }
    for (int64_t a = 0; a < set->augmented_views(); ++a) {
      if (!data::decode_view_augment(set->augment.data() + a * data::kViewAugmentFloats,
                                     static_cast<int>(set->patch_size), why)) {
        why = fmt::format("batch {}: \"{}.augment\" row {}: {}", in.getBatchId(), name, a, why);
        return std::nullopt;
      }
    }
  }
  return batch;
}

}  // namespace saccade::data_plane
