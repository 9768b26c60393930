#include "workers/policy/rollout_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

#include "schemas/tensors.h"
#include "schemas/wire.h"

namespace saccade::policy {

namespace {

// One tensor of a group: what it is and its torch type.
struct Slot {
  wire::TensorSpec spec;
  torch::ScalarType scalar;
};

// The tensors of one image's group, in wire order.
std::vector<Slot> slots_of(const RolloutShape& s) {
  const int64_t T = s.steps, G = s.group;
  return {{{"states", wire::DType::FLOAT32, {T, G, s.n_state, s.width}}, torch::kFloat32},
          {{"extent", wire::DType::FLOAT32, {2}}, torch::kFloat32},
          {{"gazes", wire::DType::FLOAT32, {T, G, 2}}, torch::kFloat32},
          {{"logProb", wire::DType::FLOAT32, {T, G}}, torch::kFloat32},
          {{"rewards", wire::DType::FLOAT32, {T, G}}, torch::kFloat32},
          {{"correct", wire::DType::UINT8, {T, G}}, torch::kUInt8}};
}

// The group of image `b` as contiguous CPU tensors, in slots_of's order.
std::vector<torch::Tensor> group_tensors(const Traces& tr, int64_t b, int64_t G) {
  const int64_t first = b * G;
  return {tr.states.slice(1, first, first + G),  tr.extent[first],
          tr.gazes.slice(1, first, first + G),   tr.log_prob.slice(1, first, first + G),
          tr.rewards.slice(1, first, first + G), tr.correct.slice(1, first, first + G)};
}

void fill_group(const Traces& tr, int64_t image, int64_t G, wire::RolloutGroup::Builder out) {
  if (!tr.states.defined() || tr.states.dim() != 4 || G < 1 || tr.states.size(1) % G != 0 ||
      image < 0 || image >= tr.states.size(1) / G) {
    throw std::invalid_argument(
        fmt::format("write_rollout_group: image {} of traces of {} rows "
                    "in groups of {}",
                    image, tr.states.defined() ? tr.states.size(1) : 0, G));
  }
  const RolloutShape shape{tr.states.size(0), G, tr.states.size(2), tr.states.size(3)};
  const std::vector<Slot> slots = slots_of(shape);
  const std::vector<torch::Tensor> values = group_tensors(tr, image, G);
  std::vector<torch::Tensor> contiguous;  // keeps the bytes alive while they are copied
  std::vector<wire::TensorOut> tensors;
  for (size_t i = 0; i < slots.size(); ++i) {
    contiguous.push_back(values[i].to(torch::kCPU, slots[i].scalar).contiguous());
    tensors.push_back({slots[i].spec, contiguous.back().data_ptr()});
  }
  wire::write_tensors(tensors, out.initTensors(static_cast<unsigned>(tensors.size())));
}

}  // namespace

size_t rollout_group_bytes(const RolloutShape& shape) {
  size_t total = 0;
  for (const Slot& slot : slots_of(shape)) total += wire::tensor_bytes(slot.spec);
  return total;
}

void write_rollout_group(const Traces& traces, int64_t image, int64_t group,
                         wire::RolloutGroup::Builder out) {
  fill_group(traces, image, group, out);
}

std::optional<Traces> read_rollout_group(wire::RolloutGroup::Reader in, const RolloutShape& shape,
                                         std::string& why) {
  const std::vector<Slot> slots = slots_of(shape);
  std::vector<wire::TensorSpec> specs;
  for (const Slot& slot : slots) specs.push_back(slot.spec);
  const std::string image = fmt::format("rollout group of image {}", in.getImageId());
  const auto data = wire::read_tensors(in.getTensors(), specs, image, why);
  if (!data) return std::nullopt;
  std::vector<torch::Tensor> values;
  for (size_t i = 0; i < slots.size(); ++i) {
    torch::Tensor v = torch::empty(slots[i].spec.shape, slots[i].scalar);
    std::memcpy(v.data_ptr(), (*data)[i], wire::tensor_bytes(slots[i].spec));
    values.push_back(std::move(v));
  }
  Traces tr;
  tr.states = values[0];
  tr.extent = values[1].view({1, 2}).expand({shape.group, 2}).contiguous();
  tr.gazes = values[2];
  tr.log_prob = values[3];
  tr.rewards = values[4];
  tr.correct = values[5].to(torch::kBool);
  if (!torch::isfinite(tr.states).all().item<bool>() ||
      !torch::isfinite(tr.log_prob).all().item<bool>() ||
      !(tr.extent >= 1 - 1e-6).all().item<bool>() || !(tr.rewards >= 0).all().item<bool>() ||
      !(tr.rewards <= 1).all().item<bool>()) {
    why = fmt::format(
        "{}: non-finite states or log-densities, an extent below 1 or a reward "
        "outside [0, 1]",
        image);
    return std::nullopt;
  }
  return tr;
}

Traces concat_traces(const std::vector<Traces>& parts) {
  if (parts.empty()) throw std::invalid_argument("concat_traces: no traces");
  auto cat = [&](auto field, int64_t dim) {
    std::vector<torch::Tensor> all;
    for (const Traces& p : parts) all.push_back(p.*field);
    return torch::cat(all, dim);
  };
  Traces out;
  out.states = cat(&Traces::states, 1);
  out.extent = cat(&Traces::extent, 0);
  out.gazes = cat(&Traces::gazes, 1);
  out.log_prob = cat(&Traces::log_prob, 1);
  out.rewards = cat(&Traces::rewards, 1);
  out.correct = cat(&Traces::correct, 1);
  return out;
}

std::string encode_rollout_group(const Traces& traces, int64_t image, int64_t group,
                                 uint64_t policy_version, uint64_t image_id) {
  capnp::MallocMessageBuilder builder;
  auto out = builder.initRoot<wire::RolloutGroup>();
  out.setPolicyVersion(policy_version);
  out.setImageId(image_id);
  fill_group(traces, image, group, out);
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  const auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

std::optional<Traces> decode_rollout_group(const std::string& bytes, const RolloutShape& shape,
                                           std::string& why) {
  std::optional<wire::AlignedFrame> frame =
      wire::AlignedFrame::copy_of(bytes.data(), bytes.size(), bytes.size() + 1, why);
  if (!frame) return std::nullopt;
  try {
    capnp::ReaderOptions limits;
    limits.traversalLimitInWords = frame->size_bytes() / sizeof(capnp::word) + 1024;
    capnp::FlatArrayMessageReader reader(frame->words(), limits);
    return read_rollout_group(reader.getRoot<wire::RolloutGroup>(), shape, why);
  } catch (const kj::Exception& e) {
    why = fmt::format("a stored rollout group that is no Cap'n Proto message: {}",
                      e.getDescription().cStr());
    return std::nullopt;
  }
}

}  // namespace saccade::policy
