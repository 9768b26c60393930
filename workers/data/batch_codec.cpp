#include "workers/data/batch_codec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

namespace saccade::workers {

static_assert(std::endian::native == std::endian::little,
              "tensors travel little-endian and are copied as they lie in memory");

namespace {

// One tensor of a batch: where its bytes lie in an SslBatch and what they are.
template <class Byte>
struct TensorSlot {
  std::string name;
  wire::DType dtype;
  std::vector<int64_t> shape;
  Byte* data;  // not owned: a buffer of the batch
  size_t bytes;
};

// The tensors of `batch` in wire order; `Batch` is SslBatch or const SslBatch.
template <class Batch>
auto slots_of(Batch& batch) {
  using Byte = std::conditional_t<std::is_const_v<Batch>, const std::byte, std::byte>;
  std::vector<TensorSlot<Byte>> slots;
  auto add = [&](std::string name, wire::DType dtype, std::vector<int64_t> shape, auto& values) {
    slots.push_back({std::move(name), dtype, std::move(shape),
                     reinterpret_cast<Byte*>(values.data()), values.size() * sizeof(values[0])});
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

std::string shape_text(capnp::List<int64_t>::Reader shape) {
  std::vector<int64_t> dims;
  for (int64_t d : shape) dims.push_back(d);
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

size_t batch_frame_bytes(const data::ViewOptions& views, int64_t images) {
  data::SslBatch one;
  one.allocate(views, 1);
  size_t per_image = 0;
  for (const auto& slot : slots_of(std::as_const(one))) per_image += slot.bytes;
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
  const auto slots = slots_of(batch);
  auto tensors = out.initTensors(static_cast<unsigned>(slots.size()));
  for (size_t i = 0; i < slots.size(); ++i) {
    auto t = tensors[static_cast<unsigned>(i)];
    t.setName(slots[i].name);
    t.setDtype(slots[i].dtype);
    auto shape = t.initShape(static_cast<unsigned>(slots[i].shape.size()));
    for (size_t d = 0; d < slots[i].shape.size(); ++d)
      shape.set(static_cast<unsigned>(d), slots[i].shape[d]);
    auto bytes = t.initData(static_cast<unsigned>(slots[i].bytes));
    if (slots[i].bytes > 0) std::memcpy(bytes.begin(), slots[i].data, slots[i].bytes);
  }
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
  const auto tensors = in.getTensors();
  if (tensors.size() != slots.size()) {
    why = fmt::format("batch {}: {} tensors, expected {}", in.getBatchId(), tensors.size(),
                      slots.size());
    return std::nullopt;
  }
  std::map<std::string, wire::Tensor::Reader> by_name;
  for (auto t : tensors) {
    const std::string name = t.getName();
    if (!by_name.emplace(name, t).second) {
      why = fmt::format("batch {}: tensor \"{}\" appears twice", in.getBatchId(), name);
      return std::nullopt;
    }
  }
  for (const auto& slot : slots) {
    const auto found = by_name.find(slot.name);
    if (found == by_name.end()) {
      why = fmt::format("batch {}: tensor \"{}\" is missing", in.getBatchId(), slot.name);
      return std::nullopt;
    }
    const wire::Tensor::Reader t = found->second;
    std::string problem;
    const auto shape = t.getShape();
    bool same_shape = shape.size() == slot.shape.size();
    for (unsigned d = 0; same_shape && d < shape.size(); ++d)
      same_shape = shape[d] == slot.shape[d];
    if (t.getDtype() != slot.dtype) {
      problem =
          fmt::format("batch {}: tensor \"{}\" has dtype {}, expected {}", in.getBatchId(),
                      slot.name, static_cast<int>(t.getDtype()), static_cast<int>(slot.dtype));
    } else if (!same_shape) {
      problem = fmt::format("batch {}: tensor \"{}\" has shape {}, expected [{}]", in.getBatchId(),
                            slot.name, shape_text(shape), fmt::join(slot.shape, ", "));
    } else if (t.getData().size() != slot.bytes) {
      problem = fmt::format("batch {}: tensor \"{}\" holds {} bytes, its shape needs {}",
                            in.getBatchId(), slot.name, t.getData().size(), slot.bytes);
    }
    if (!problem.empty()) {
      why = std::move(problem);
      return std::nullopt;
    }
    if (slot.bytes > 0) std::memcpy(slot.data, t.getData().begin(), slot.bytes);
  }
  return batch;
}

}  // namespace saccade::workers
