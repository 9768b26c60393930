#include "model/weights.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

namespace saccade::model {
namespace {

struct DTypePair {
  DType raw;
  torch::ScalarType scalar;
};
constexpr DTypePair kPairs[] = {
    {DType::kBool, torch::kBool},  {DType::kU8, torch::kByte},   {DType::kI8, torch::kChar},
    {DType::kI16, torch::kShort},  {DType::kF16, torch::kHalf},  {DType::kBF16, torch::kBFloat16},
    {DType::kI32, torch::kInt},    {DType::kF32, torch::kFloat}, {DType::kI64, torch::kLong},
    {DType::kF64, torch::kDouble},
};

DType raw_dtype(torch::ScalarType t) {
  for (const auto& p : kPairs)
    if (p.scalar == t) return p.raw;
  throw std::invalid_argument(std::string("tensor dtype ") + c10::toString(t) +
                              " has no safetensors equivalent here");
}

torch::ScalarType scalar_type(DType d) {
  for (const auto& p : kPairs)
    if (p.raw == d) return p.scalar;
  throw std::runtime_error(std::string("safetensors dtype ") + dtype_name(d) +
                           " is not supported by LibTorch here");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Every named parameter and buffer, in a stable order.
std::vector<std::pair<std::string, torch::Tensor>> named_tensors(const NamedModules& modules) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<std::string> seen;
  for (const auto& [prefix, module] : modules) {
    if (module == nullptr) throw std::invalid_argument("modules[\"" + prefix + "\"]: null module");
    for (const auto& item : module->named_parameters(true))
      out.emplace_back(join(prefix, item.key()), item.value());
    for (const auto& item : module->named_buffers(true))
      out.emplace_back(join(prefix, item.key()), item.value());
  }
  for (const auto& [name, t] : out)
    if (!seen.insert(name).second)
      throw std::invalid_argument("modules: duplicate tensor name \"" + name + "\"");
  return out;
}

// Shortest text that reads back to the same double.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

RawTensor to_raw_tensor(const torch::Tensor& tensor) {
  RawTensor raw;
  raw.dtype = raw_dtype(tensor.scalar_type());
  auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  raw.shape.assign(cpu.sizes().begin(), cpu.sizes().end());
  raw.data.assign(static_cast<const char*>(cpu.data_ptr()), cpu.numel() * cpu.element_size());
  return raw;
}

torch::Tensor from_raw_tensor(const RawTensor& raw) {
  auto t = torch::empty(raw.shape, torch::TensorOptions().dtype(scalar_type(raw.dtype)));
  if (static_cast<size_t>(t.numel() * t.element_size()) != raw.data.size())
    throw std::runtime_error("raw tensor: data size disagrees with dtype x shape");
  if (!raw.data.empty()) std::memcpy(t.data_ptr(), raw.data.data(), raw.data.size());
  return t;
}

RawTensorMap to_raw_tensors(const NamedModules& modules) {
  RawTensorMap out;
  for (const auto& [name, t] : named_tensors(modules)) out.emplace(name, to_raw_tensor(t));
  return out;
}

std::string save_modules(const NamedModules& modules, const Metadata& metadata) {
  return serialize_safetensors(to_raw_tensors(modules), metadata);
}

void load_modules(const NamedModules& modules, std::string_view bytes, Metadata* metadata) {
  RawTensorMap raw = parse_safetensors(bytes, metadata);
  const auto targets = named_tensors(modules);
  // Check everything first so a refused checkpoint leaves the modules untouched.
  for (const auto& [name, target] : targets) {
    auto it = raw.find(name);
    if (it == raw.end()) throw std::runtime_error("checkpoint: missing tensor \"" + name + "\"");
    const std::vector<int64_t> expected(target.sizes().begin(), target.sizes().end());
    if (it->second.shape != expected)
      throw std::runtime_error("checkpoint: tensor \"" + name + "\" has shape " +
                               shape_string(it->second.shape) + ", the module expects " +
                               shape_string(expected));
    if (it->second.dtype != raw_dtype(target.scalar_type()))
      throw std::runtime_error("checkpoint: tensor \"" + name + "\" has dtype " +
                               dtype_name(it->second.dtype) + ", the module expects " +
                               dtype_name(raw_dtype(target.scalar_type())));
  }
  if (raw.size() != targets.size()) {
    std::set<std::string> known;
    for (const auto& [name, t] : targets) known.insert(name);
    for (const auto& [name, t] : raw)
      if (!known.count(name))
        throw std::runtime_error("checkpoint: unexpected tensor \"" + name + "\"");
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, target] : targets) {
    auto t = target;  // shares storage with the module's tensor
    t.copy_(from_raw_tensor(raw.at(name)));
  }
}

std::string export_backbone(FovealBackboneImpl& backbone) {
  const auto& o = backbone.options();
  Metadata meta{{"format", "saccade.foveal_backbone"},
                {"patch_size", std::to_string(o.patch_size)},
                {"channels", std::to_string(o.channels)},
                {"depth", std::to_string(o.depth)},
                {"width", std::to_string(o.width)},
                {"heads", std::to_string(o.heads)},
                {"mlp_hidden", std::to_string(o.mlp_hidden())},
                {"n_state", std::to_string(o.n_state)},
                {"pos_mlp_hidden", std::to_string(o.pos_mlp_hidden)},
                {"state_input", state_input_name(o.state_input)},
                {"gelu", gelu_name(o.gelu)},
                {"norm_eps", exact(o.norm_eps)}};
  return save_modules({{"", &backbone}}, meta);
}

BackboneOptions backbone_options_from_metadata(const Metadata& m) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    if (it == m.end())
      throw std::runtime_error(std::string("backbone metadata: missing \"") + key + "\"");
    return it->second;
  };
  if (get("format") != "saccade.foveal_backbone")
    throw std::runtime_error("backbone metadata: format is \"" + get("format") +
                             "\", expected \"saccade.foveal_backbone\"");
  try {
    BackboneOptions o;
    o.patch_size = std::stoll(get("patch_size"));
    o.channels = std::stoll(get("channels"));
    o.depth = std::stoll(get("depth"));
    o.width = std::stoll(get("width"));
    o.heads = std::stoll(get("heads"));
    o.mlp_ratio = static_cast<double>(std::stoll(get("mlp_hidden"))) / static_cast<double>(o.width);
    o.n_state = std::stoll(get("n_state"));
    o.pos_mlp_hidden = std::stoll(get("pos_mlp_hidden"));
    o.norm_eps = std::stod(get("norm_eps"));
    // Backbones exported before state_input existed carried the normed state as is.
    const auto state_input = m.find("state_input");
    if (state_input != m.end()) o.state_input = parse_state_input(state_input->second);
    // And before model.gelu existed, with the erf GELU.
    const auto gelu = m.find("gelu");
    if (gelu != m.end()) o.gelu = parse_gelu(gelu->second);
    o.validate();
    return o;
  } catch (const std::logic_error& e) {  // stoll's invalid_argument / out_of_range
    throw std::runtime_error(std::string("backbone metadata: ") + e.what());
  }
}

FovealBackbone import_backbone(std::string_view bytes) {
  Metadata metadata;
  parse_safetensors(bytes, &metadata);
  FovealBackbone backbone(backbone_options_from_metadata(metadata));
  load_modules({{"", backbone.get()}}, bytes);
  return backbone;
}

std::string extract_backbone(std::string_view modules_bytes, const std::string& prefix,
                             const BackboneOptions& options) {
  const std::string lead = prefix + ".";
  RawTensorMap backbone_tensors;
  for (auto& [name, tensor] : parse_safetensors(modules_bytes))
    if (name.rfind(lead, 0) == 0) backbone_tensors.emplace(name.substr(lead.size()), tensor);
  FovealBackbone backbone(options);
  load_modules({{"", backbone.get()}}, serialize_safetensors(backbone_tensors));
  return export_backbone(*backbone);
}

}  // namespace saccade::model
