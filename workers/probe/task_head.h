// The frozen heads the probe writes (probe.head) and the policy and eval
// stages read: a linear head on the first state token, or the paper's
// one-layer transformer pooling every state token (model::TaskHead). One type
// for both, so rewards and evaluation do not care which was chosen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace saccade::model {
class TaskHeadImpl;
}

namespace saccade::probe {

// Either kind; `transformer` set means the transformer kind (weight/bias unused).
struct TaskHead {
  TaskHead() = default;
  TaskHead(at::Tensor weight, at::Tensor bias) : weight(std::move(weight)), bias(std::move(bias)) {}
  explicit TaskHead(std::shared_ptr<model::TaskHeadImpl> transformer)
      : transformer(std::move(transformer)) {}

  at::Tensor weight;                                 // [classes, D]: logits = state[:, 0] W^T + b
  at::Tensor bias;                                   // [classes]
  std::shared_ptr<model::TaskHeadImpl> transformer;  // shared, frozen, in eval mode

  bool defined() const { return transformer != nullptr || weight.defined(); }
  const char* kind() const { return transformer ? "transformer" : "linear"; }
  int64_t classes() const;
  int64_t in_dim() const;  // D
  // Throws std::invalid_argument naming `what` unless the head reads states of
  // n_state tokens of width d.
  void check_fits(int64_t n_state, int64_t d, const std::string& what) const;
  // state [B, S, D] -> logits [B, classes] fp32 on state's device (no gradient;
  // the transformer is moved to that device on first use).
  at::Tensor logits(const at::Tensor& state) const;
};

// Top-1 of the head on states [N, S, D] against labels [N].
double head_accuracy(const TaskHead& head, const at::Tensor& states, const at::Tensor& labels);

// probe_head.safetensors: the task head (after glimpses) and the ViT-mode
// head, of one kind, and the pretraining checkpoint whose teacher they read.
struct ProbeHeads {
  TaskHead task;
  TaskHead vit;  // may be undefined (files written before the probe kept one)
  int64_t checkpoint_step = -1;
  // Set when the probe read a backbone file (`saccade probe --backbone`, e.g. one trained on
  // another machine) instead of a checkpoint: the later stages read that file, and refuse it
  // when its CRC-32 no longer matches.
  std::string backbone_file;
  uint32_t backbone_crc32 = 0;
};

// What a probe head (and so the policy and the evaluation on it) was fitted on:
// "checkpoint N", or "backbone file F" when backbone_file is set.
std::string backbone_origin(int64_t checkpoint_step, const std::string& backbone_file);

// Metadata format "saccade.linear_probe" (tensors weight, bias, vit_weight,
// vit_bias) or "saccade.transformer_probe" (task.* and vit.* of two
// model::TaskHead, their options in the metadata). Extra metadata is kept.
std::string serialize_probe_heads(const ProbeHeads& heads,
                                  const std::map<std::string, std::string>& extra = {});
// Throws std::runtime_error naming `origin` and what is missing.
ProbeHeads parse_probe_heads(const std::string& bytes, const std::string& origin);

}  // namespace saccade::probe
