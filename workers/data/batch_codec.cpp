#include "workers/data/batch_codec.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "schemas/tensors.h"

namespace saccade::workers {

namespace {

// One tensor of a batch: what it is and where its bytes lie in an SslBatch.
template <class Byte>
struct TensorSlot {
  wire::TensorSpec spec;
  Byte* data;  // not owned: a buffer of the batch
};

// The tensors of `batch` in wire order; `Batch` is SslBatch or const SslBatch.
template <class Batch>
auto slots_of(Batch& batch) {
  using Byte = std::conditional_t<std::is_const_v<Batch>, const std::byte, std::byte>;
  std::vector<TensorSlot<Byte>> slots;
  auto add = [&](std::string name, wire::DType dtype, std::vector<int64_t> shape, auto& values) {
    slots.push_back(
        {{std::move(name), dtype, std::move(shape)}, reinterpret_cast<Byte*>(values.data())});
  };
  auto add_views = [&](const char* name, auto& views) {
    const int64_t n = views.views, t = views.tokens, c = views.channels, p = views.patch_size;
    add(fmt::format("{}.patches", name), wire::DType::FLOAT32, {n, t, c, p, p}, views.patches);
    add(fmt::format("{}.positions", name), wire::DType::FLOAT32, {n, t, 3}, views.positions);
  };
  add_views("teacher_global", batch.teacher_global);
  add_views("student_global", batch.student_global);
  add_views("student_local", batch.student_local);
  add_views("teacher_seq", batch.teacher_seq);
  add_views("student_seq", batch.student_seq);
  add("labels", wire::DType::INT64, {batch.batch_size}, batch.labels);
  add("indices", wire::DType::INT64, {batch.batch_size}, batch.indices);
  return slots;
}

}  // namespace

size_t batch_frame_bytes(const data::ViewOptions& views, int64_t images) {
  data::SslBatch one;
  one.allocate(views, 1);
  size_t per_image = 0;
  for (const auto& slot : slots_of(std::as_const(one))) per_image += wire::tensor_bytes(slot.spec);
  constexpr size_t kEnvelope = 4096;  // header, names, shapes and list pointers
  return kEnvelope + per_image * static_cast<size_t>(images);
}

void write_batch(const data::SslBatch& batch, uint64_t batch_id, data::DataPosition position,
                 wire::Batch::Builder out) {
  out.setBatchId(batch_id);
  out.setEpoch(position.epoch);
  out.setPosition(position.offset);
  out.setImages(static_cast<uint32_t>(batch.batch_size));
  out.setSkippedCorrupt(static_cast<uint32_t>(batch.skipped_corrupt));
  std::vector<wire::TensorOut> tensors;
  for (const auto& slot : slots_of(batch)) tensors.push_back({slot.spec, slot.data});
  wire::write_tensors(tensors, out.initTensors(static_cast<unsigned>(tensors.size())));
}

std::optional<data::SslBatch> read_batch(wire::Batch::Reader in, const data::ViewOptions& views,
                                         int64_t expected_images, std::string& why) {
  if (in.getImages() != expected_images) {
    why = fmt::format("batch {}: {} images, expected {}", in.getBatchId(), in.getImages(),
                      expected_images);
    return std::nullopt;
  }
  data::SslBatch batch;
  batch.allocate(views, expected_images);
  batch.skipped_corrupt = in.getSkippedCorrupt();
  const auto slots = slots_of(batch);
  std::vector<wire::TensorSpec> specs;
  for (const auto& slot : slots) specs.push_back(slot.spec);
  const auto data =
      wire::read_tensors(in.getTensors(), specs, fmt::format("batch {}", in.getBatchId()), why);
  if (!data) return std::nullopt;
  for (size_t i = 0; i < slots.size(); ++i) {
    const size_t bytes = wire::tensor_bytes(slots[i].spec);
    if (bytes > 0) std::memcpy(slots[i].data, (*data)[i], bytes);
  }
  return batch;
}

}  // namespace saccade::workers
