// Named tensors on the wire (wire::Tensor lists), the one codec of every plane
// that carries tensors: data actors' batches and rollout actors' groups.
//
// Writing copies raw bytes in; reading trusts nothing: the list must hold each
// expected tensor exactly once, with its dtype, shape and byte size, before a
// byte is copied out, and a mismatch yields a reason naming the tensor (the
// caller drops the message), never a crash. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/messages.capnp.h"

namespace saccade::wire {

// What one tensor must be: its name, element type and shape.
struct TensorSpec {
  std::string name;
  DType dtype = DType::FLOAT32;
  std::vector<int64_t> shape;
};

// Bytes of a tensor of `spec` (product of the shape times the element size).
size_t tensor_bytes(const TensorSpec& spec);

// A tensor to write: its spec and its bytes (tensor_bytes(spec) of them, not owned).
struct TensorOut {
  TensorSpec spec;
  const void* data = nullptr;
  // The bytes outlive the message and stay readable up to the next 8-byte boundary:
  // a large tensor then becomes a segment of the message instead of a copy in one (the
  // frame is still one flat copy), which halves the memory traffic of encoding.
  bool borrow = false;
};

// Fills `out` (initialised by the caller with tensors.size() elements) in order.
void write_tensors(const std::vector<TensorOut>& tensors, capnp::List<Tensor>::Builder out);

// The bytes of each of `expected`, in its order, or nullopt with `why` set
// ("<what>: tensor "x" has shape [..], expected [..]") when `in` is not exactly
// those tensors. The pointers live as long as the message `in` reads.
std::optional<std::vector<const std::byte*>> read_tensors(capnp::List<Tensor>::Reader in,
                                                          const std::vector<TensorSpec>& expected,
                                                          std::string_view what, std::string& why);

}  // namespace saccade::wire
