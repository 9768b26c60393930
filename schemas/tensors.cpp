#include "schemas/tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <capnp/orphan.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>

namespace saccade::wire {

static_assert(std::endian::native == std::endian::little,
              "tensors travel little-endian and are copied as they lie in memory");

namespace {

size_t element_bytes(DType dtype) {
  switch (dtype) {
    case DType::UINT8:
      return 1;
    case DType::INT64:
      return 8;
    default:  // FLOAT32, INT32
      return 4;
  }
}

}  // namespace

size_t tensor_bytes(const TensorSpec& spec) {
  size_t n = element_bytes(spec.dtype);
  for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
  return n;
}

void write_tensors(const std::vector<TensorOut>& tensors, capnp::List<Tensor>::Builder out) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i].spec;
    auto t = out[static_cast<unsigned>(i)];
    t.setName(spec.name);
    t.setDtype(spec.dtype);
    auto dims = t.initShape(static_cast<unsigned>(spec.shape.size()));
    for (size_t d = 0; d < spec.shape.size(); ++d)
      dims.set(static_cast<unsigned>(d), spec.shape[d]);
    const size_t bytes = tensor_bytes(spec);
    constexpr size_t kBorrowFrom = 4096;  // smaller tensors are cheaper copied than a segment
    if (tensors[i].borrow && bytes >= kBorrowFrom &&
        reinterpret_cast<uintptr_t>(tensors[i].data) % 8 == 0) {
      t.adoptData(capnp::Orphanage::getForMessageContaining(t).referenceExternalData(
          capnp::Data::Reader(static_cast<const kj::byte*>(tensors[i].data), bytes)));
      continue;
    }
    auto data = t.initData(static_cast<unsigned>(bytes));
    if (bytes > 0) std::memcpy(data.begin(), tensors[i].data, bytes);
  }
}

std::optional<std::vector<const std::byte*>> read_tensors(capnp::List<Tensor>::Reader in,
                                                          const std::vector<TensorSpec>& expected,
                                                          std::string_view what, std::string& why) {
  if (in.size() != expected.size()) {
    why = fmt::format("{}: {} tensors, expected {}", what, in.size(), expected.size());
    return std::nullopt;
  }
  std::map<std::string, Tensor::Reader, std::less<>> by_name;
  for (auto t : in) {
    if (!by_name.emplace(std::string(t.getName()), t).second) {
      why = fmt::format("{}: tensor \"{}\" appears twice", what, std::string(t.getName()));
      return std::nullopt;
    }
  }
  std::vector<const std::byte*> data;
  for (const TensorSpec& spec : expected) {
    const auto found = by_name.find(spec.name);
    if (found == by_name.end()) {
      why = fmt::format("{}: tensor \"{}\" is missing", what, spec.name);
      return std::nullopt;
    }
    const Tensor::Reader t = found->second;
    std::vector<int64_t> dims;
    for (int64_t d : t.getShape()) dims.push_back(d);
    if (t.getDtype() != spec.dtype) {
      why = fmt::format("{}: tensor \"{}\" has dtype {}, expected {}", what, spec.name,
                        static_cast<int>(t.getDtype()), static_cast<int>(spec.dtype));
      return std::nullopt;
    }
    if (dims != spec.shape) {
      why = fmt::format("{}: tensor \"{}\" has shape [{}], expected [{}]", what, spec.name,
                        fmt::join(dims, ", "), fmt::join(spec.shape, ", "));
      return std::nullopt;
    }
    if (t.getData().size() != tensor_bytes(spec)) {
      why = fmt::format("{}: tensor \"{}\" holds {} bytes, its shape needs {}", what, spec.name,
                        t.getData().size(), tensor_bytes(spec));
      return std::nullopt;
    }
    data.push_back(reinterpret_cast<const std::byte*>(t.getData().begin()));
  }
  return data;
}

}  // namespace saccade::wire
