#include "workers/probe/task_head.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "model/heads.h"
#include "model/weights.h"

namespace saccade::probe {
namespace {

constexpr const char* kLinearFormat = "saccade.linear_probe";
constexpr const char* kTransformerFormat = "saccade.transformer_probe";

std::string meta_or_throw(const model::Metadata& meta, const char* key, const std::string& origin) {
  const auto it = meta.find(key);
  if (it == meta.end())
    throw std::runtime_error(fmt::format("{}: metadata has no \"{}\"", origin, key));
  return it->second;
}

TaskHead linear_head(const model::RawTensorMap& tensors, const std::string& prefix, bool required,
                     const std::string& origin) {
  const auto weight = tensors.find(prefix + "weight"), bias = tensors.find(prefix + "bias");
  if (weight == tensors.end() || bias == tensors.end()) {
    if (!required) return {};
    throw std::runtime_error(
        fmt::format("{}: expected tensors {}weight and {}bias", origin, prefix, prefix));
  }
  return {model::from_raw_tensor(weight->second), model::from_raw_tensor(bias->second)};
}

}  // namespace

int64_t TaskHead::classes() const {
  if (transformer) return transformer->options().n_classes;
  return weight.defined() ? weight.size(0) : 0;
}

int64_t TaskHead::in_dim() const {
  if (transformer) return transformer->options().in_dim;
  return weight.defined() && weight.dim() == 2 ? weight.size(1) : 0;
}

void TaskHead::check_fits(int64_t n_state, int64_t d, const std::string& what) const {
  if (transformer) {
    const auto& o = transformer->options();
    if (o.in_dim != d || o.n_state != n_state)
      throw std::invalid_argument(fmt::format(
          "{}: the transformer head reads {} state tokens of width {}, the backbone has {} of {}",
          what, o.n_state, o.in_dim, n_state, d));
    return;
  }
  if (!weight.defined() || weight.dim() != 2 || !bias.defined() || bias.dim() != 1 ||
      bias.size(0) != weight.size(0) || weight.size(1) != d)
    throw std::invalid_argument(
        fmt::format("{}: expected a linear head [classes, {}] with a bias [classes]", what, d));
}

at::Tensor TaskHead::logits(const at::Tensor& state) const {
  torch::NoGradGuard no_grad;
  if (transformer) {
    const torch::Device device = state.device();
    if (transformer->parameters().front().device() != device) transformer->to(device);
    return transformer->forward(state.to(torch::kFloat32));
  }
  return torch::addmm(bias.to(state.device(), torch::kFloat32),
                      state.select(1, 0).to(torch::kFloat32),
                      weight.to(state.device(), torch::kFloat32).t());
}

double head_accuracy(const TaskHead& head, const at::Tensor& states, const at::Tensor& labels) {
  return head.logits(states).argmax(1).cpu().eq(labels).to(torch::kFloat64).mean().item<double>();
}

std::string serialize_probe_heads(const ProbeHeads& heads,
                                  const std::map<std::string, std::string>& extra) {
  model::Metadata meta = extra;
  meta["checkpoint_step"] = std::to_string(heads.checkpoint_step);
  if (!heads.backbone_file.empty()) {
    meta["backbone_file"] = heads.backbone_file;
    meta["backbone_crc32"] = std::to_string(heads.backbone_crc32);
  }
  if (!heads.task.transformer) {
    meta["format"] = kLinearFormat;
    meta["input"] = "first state token";
    model::RawTensorMap tensors{{"weight", model::to_raw_tensor(heads.task.weight)},
                                {"bias", model::to_raw_tensor(heads.task.bias)}};
    if (heads.vit.defined()) {
      tensors.emplace("vit_weight", model::to_raw_tensor(heads.vit.weight));
      tensors.emplace("vit_bias", model::to_raw_tensor(heads.vit.bias));
    }
    return model::serialize_safetensors(tensors, meta);
  }
  const auto& o = heads.task.transformer->options();
  meta["format"] = kTransformerFormat;
  meta["input"] = "every state token";
  meta["in_dim"] = std::to_string(o.in_dim);
  meta["n_state"] = std::to_string(o.n_state);
  meta["n_classes"] = std::to_string(o.n_classes);
  meta["heads"] = std::to_string(o.heads);
  meta["mlp_ratio"] = fmt::format("{}", o.mlp_ratio);
  model::NamedModules modules{{"task", heads.task.transformer.get()}};
  if (heads.vit.defined()) {
    if (!heads.vit.transformer)
      throw std::invalid_argument("serialize_probe_heads: the two heads must be of one kind");
    modules.emplace_back("vit", heads.vit.transformer.get());
  }
  return model::save_modules(modules, meta);
}

std::string backbone_origin(int64_t checkpoint_step, const std::string& backbone_file) {
  return backbone_file.empty() ? fmt::format("checkpoint {}", checkpoint_step)
                               : fmt::format("backbone file {}", backbone_file);
}

ProbeHeads parse_probe_heads(const std::string& bytes, const std::string& origin) {
  model::Metadata meta;
  model::RawTensorMap tensors;
  try {
    tensors = model::parse_safetensors(bytes, &meta);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: not a safetensors file ({})", origin, e.what()));
  }
  ProbeHeads heads;
  const std::string format = meta.count("format") ? meta["format"] : "";
  if (format != kLinearFormat && format != kTransformerFormat)
    throw std::runtime_error(
        fmt::format("{}: expected metadata format \"{}\" or \"{}\", found \"{}\"", origin,
                    kLinearFormat, kTransformerFormat, format));
  try {
    heads.checkpoint_step = std::stoll(meta_or_throw(meta, "checkpoint_step", origin));
  } catch (const std::logic_error&) {
    throw std::runtime_error(fmt::format("{}: checkpoint_step is not an integer", origin));
  }
  if (meta.count("backbone_file")) {
    heads.backbone_file = meta["backbone_file"];
    try {
      heads.backbone_crc32 =
          static_cast<uint32_t>(std::stoul(meta_or_throw(meta, "backbone_crc32", origin)));
    } catch (const std::logic_error&) {
      throw std::runtime_error(fmt::format("{}: backbone_crc32 is not an integer", origin));
    }
  }
  if (format == kLinearFormat) {
    heads.task = linear_head(tensors, "", true, origin);
    heads.vit = linear_head(tensors, "vit_", false, origin);
    return heads;
  }
  model::TaskHeadOptions o;
  o.kind = model::TaskHeadOptions::Kind::kTransformer;
  try {
    o.in_dim = std::stoll(meta_or_throw(meta, "in_dim", origin));
    o.n_state = std::stoll(meta_or_throw(meta, "n_state", origin));
    o.n_classes = std::stoll(meta_or_throw(meta, "n_classes", origin));
    o.heads = std::stoll(meta_or_throw(meta, "heads", origin));
    o.mlp_ratio = std::stod(meta_or_throw(meta, "mlp_ratio", origin));
    o.validate();
  } catch (const std::logic_error& e) {
    throw std::runtime_error(
        fmt::format("{}: bad transformer head options ({})", origin, e.what()));
  }
  const bool has_vit = tensors.count("vit.linear.weight") > 0;
  auto task = std::make_shared<model::TaskHeadImpl>(o);
  std::shared_ptr<model::TaskHeadImpl> vit =
      has_vit ? std::make_shared<model::TaskHeadImpl>(o) : nullptr;
  model::NamedModules modules{{"task", task.get()}};
  if (vit) modules.emplace_back("vit", vit.get());
  try {
    model::load_modules(modules, bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: {}", origin, e.what()));
  }
  task->eval();
  heads.task = TaskHead(task);
  if (vit) {
    vit->eval();
    heads.vit = TaskHead(vit);
  }
  return heads;
}

}  // namespace saccade::probe
