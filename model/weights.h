// Saving and loading modules by parameter name in the safetensors format.
// Loading is strict: a missing, unexpected, wrong-shape or wrong-dtype tensor
// is refused with its name, and nothing is modified unless everything matches.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/backbone.h"
#include "model/safetensors.h"

namespace saccade::model {

// Modules saved together, each under a prefix: {"backbone", &bb} stores
// "backbone.blocks.0.attn.qkv.weight". An empty prefix stores bare names.
using NamedModules = std::vector<std::pair<std::string, torch::nn::Module*>>;

// Every parameter and buffer of `modules`, named "<prefix>.<name>", as CPU bytes.
RawTensorMap to_raw_tensors(const NamedModules& modules);
RawTensor to_raw_tensor(const torch::Tensor& tensor);  // throws on unsupported dtypes
torch::Tensor from_raw_tensor(const RawTensor& raw);   // a CPU tensor owning a copy

std::string save_modules(const NamedModules& modules, const Metadata& metadata = {});
// Copies the tensors of `bytes` into `modules` (on their devices). Throws
// std::runtime_error naming the first missing / unexpected / mismatched tensor.
void load_modules(const NamedModules& modules, std::string_view bytes,
                  Metadata* metadata = nullptr);

// The backbone alone, bare names (docs/model.md), with its options in
// __metadata__ ("format": "saccade.foveal_backbone", "width", "depth", ...),
// loadable in PyTorch with safetensors.torch.load_file.
std::string export_backbone(FovealBackboneImpl& backbone);
// The options stored by export_backbone (throws when a key is missing).
BackboneOptions backbone_options_from_metadata(const Metadata& metadata);
// A backbone rebuilt from export_backbone's bytes: its options from the
// metadata, its weights loaded strictly (on the CPU).
FovealBackbone import_backbone(std::string_view bytes);
// The backbone saved under `prefix` in save_modules() bytes (e.g. the "teacher"
// blob of a training checkpoint, prefix "backbone"), exported as export_backbone
// does, without building anything else of the model that holds it. Throws
// naming the tensor when those bytes hold no backbone of `options`.
std::string extract_backbone(std::string_view modules_bytes, const std::string& prefix,
                             const BackboneOptions& options);

}  // namespace saccade::model
