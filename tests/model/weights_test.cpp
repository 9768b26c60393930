// Save / load / export by name: exact round trips and strict refusal.
#include "model/weights.h"

#include <gtest/gtest.h>

#include "model/heads.h"
#include "model/policy.h"

namespace saccade::model {
namespace {

BackboneOptions small_tiny() {
  auto o = BackboneOptions::tiny();
  o.depth = 2;
  return o;
}

std::string load_error(const NamedModules& modules, const std::string& bytes) {
  try {
    load_modules(modules, bytes);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void expect_same_tensors(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
}

TEST(Weights, SaveLoadRoundTripIsExactForEveryModule) {
  torch::manual_seed(10);
  FovealBackbone bb_a(small_tiny());
  DinoHeadOptions dino;
  dino.in_dim = 192;
  dino.hidden_dim = 64;
  dino.bottleneck_dim = 16;
  dino.n_prototypes = 32;
  DinoHead head_a(dino);
  TaskHeadOptions task;
  task.kind = TaskHeadOptions::Kind::kTransformer;
  task.in_dim = 192;
  task.heads = 3;
  task.n_classes = 10;
  TaskHead task_a(task);
  PolicyOptions pol;
  pol.in_dim = 192;
  pol.width = 32;
  pol.heads = 2;
  pol.depth = 1;
  GazePolicy policy_a(pol);
  const std::string bytes = save_modules({{"backbone", bb_a.get()},
                                          {"dino_head", head_a.get()},
                                          {"task_head", task_a.get()},
                                          {"policy", policy_a.get()}},
                                         {{"step", "42"}});

  torch::manual_seed(11);  // different initial weights
  FovealBackbone bb_b(small_tiny());
  DinoHead head_b(dino);
  TaskHead task_b(task);
  GazePolicy policy_b(pol);
  const NamedModules targets{{"backbone", bb_b.get()},
                             {"dino_head", head_b.get()},
                             {"task_head", task_b.get()},
                             {"policy", policy_b.get()}};
  ASSERT_FALSE(torch::equal(bb_a->named_parameters()["state_embed"],
                            bb_b->named_parameters()["state_embed"]));
  Metadata meta;
  load_modules(targets, bytes, &meta);
  EXPECT_EQ(meta.at("step"), "42");
  expect_same_tensors(*bb_a, *bb_b);
  expect_same_tensors(*head_a, *head_b);
  expect_same_tensors(*task_a, *task_b);
  expect_same_tensors(*policy_a, *policy_b);
  EXPECT_EQ(save_modules(targets, {{"step", "42"}}), bytes);  // byte-identical re-save

  auto patches = torch::randn({2, 5, 3, 16, 16}), pos = torch::rand({2, 5, 3});
  EXPECT_TRUE(torch::equal(bb_a->step(patches, pos).state, bb_b->step(patches, pos).state));
}

TEST(Weights, ExportedBackboneUsesDocumentedNamesAndRoundTrips) {
  torch::manual_seed(12);
  auto o = small_tiny();
  o.state_input = BackboneOptions::StateInput::kProjected;  // state_proj is documented too
  FovealBackbone bb(o);
  const std::string bytes = export_backbone(*bb);
  Metadata meta;
  const RawTensorMap raw = parse_safetensors(bytes, &meta);
  EXPECT_EQ(meta.at("format"), "saccade.foveal_backbone");
  const auto back = backbone_options_from_metadata(meta);
  EXPECT_EQ(back.width, o.width);
  EXPECT_EQ(back.depth, o.depth);
  EXPECT_EQ(back.mlp_hidden(), o.mlp_hidden());
  EXPECT_EQ(back.norm_eps, o.norm_eps);
  // docs/model.md lists these names and shapes for PyTorch users.
  const std::map<std::string, std::vector<int64_t>> documented{
      {"patch_embed.weight", {192, 768}},
      {"patch_embed.bias", {192}},
      {"pos_mlp.fc1.weight", {64, 3}},
      {"pos_mlp.fc1.bias", {64}},
      {"pos_mlp.fc2.weight", {192, 64}},
      {"pos_mlp.fc2.bias", {192}},
      {"state_embed", {8, 192}},
      {"state_proj.weight", {192, 192}},
      {"state_proj.bias", {192}},
      {"blocks.1.norm1.weight", {192}},
      {"blocks.1.attn.qkv.weight", {576, 192}},
      {"blocks.1.attn.qkv.bias", {576}},
      {"blocks.1.attn.proj.weight", {192, 192}},
      {"blocks.1.ls1.gamma", {192}},
      {"blocks.1.norm2.bias", {192}},
      {"blocks.1.mlp.fc1.weight", {768, 192}},
      {"blocks.1.mlp.fc2.weight", {192, 768}},
      {"blocks.1.ls2.gamma", {192}},
      {"norm.weight", {192}},
      {"norm.bias", {192}}};
  for (const auto& [name, shape] : documented) {
    ASSERT_TRUE(raw.count(name)) << name;
    EXPECT_EQ(raw.at(name).shape, shape) << name;
    EXPECT_EQ(raw.at(name).dtype, DType::kF32) << name;
  }
  EXPECT_EQ(raw.size(), 11u + 2u * 14u);  // 11 outside the blocks, 14 per block
  EXPECT_EQ(meta.at("state_input"), "projected");
  EXPECT_EQ(back.state_input, BackboneOptions::StateInput::kProjected);
  // The paper's state input (the default) has no state_proj and says so.
  Metadata plain_meta;
  const RawTensorMap plain =
      parse_safetensors(export_backbone(*FovealBackbone(small_tiny())), &plain_meta);
  EXPECT_EQ(plain_meta.at("state_input"), "normed");
  EXPECT_EQ(plain.count("state_proj.weight"), 0u);
  EXPECT_EQ(backbone_options_from_metadata(plain_meta).state_input,
            BackboneOptions::StateInput::kNormed);
  // The gated state input exports its gate and memory embedding under the documented names.
  auto go = small_tiny();
  go.state_input = BackboneOptions::StateInput::kGated;
  Metadata gated_meta;
  const RawTensorMap gated = parse_safetensors(export_backbone(*FovealBackbone(go)), &gated_meta);
  EXPECT_EQ(gated_meta.at("state_input"), "gated");
  EXPECT_EQ(gated.at("state_gate.weight").shape, (std::vector<int64_t>{192, 384}));
  EXPECT_EQ(gated.at("state_gate.bias").shape, (std::vector<int64_t>{192}));
  EXPECT_EQ(gated.at("memory_embed").shape, (std::vector<int64_t>{8, 192}));
  EXPECT_EQ(backbone_options_from_metadata(gated_meta).state_input,
            BackboneOptions::StateInput::kGated);
  FovealBackbone other(back);
  load_modules({{"", other.get()}}, bytes);
  expect_same_tensors(*bb, *other);
  // The GELU is part of the function: recorded, and absent (older exports) it is erf.
  EXPECT_EQ(meta.at("gelu"), "erf");
  auto to = small_tiny();
  to.gelu = BackboneOptions::Gelu::kTanh;
  Metadata tanh_meta;
  parse_safetensors(export_backbone(*FovealBackbone(to)), &tanh_meta);
  EXPECT_EQ(tanh_meta.at("gelu"), "tanh");
  EXPECT_EQ(backbone_options_from_metadata(tanh_meta).gelu, BackboneOptions::Gelu::kTanh);
  tanh_meta.erase("gelu");
  EXPECT_EQ(backbone_options_from_metadata(tanh_meta).gelu, BackboneOptions::Gelu::kErf);
  tanh_meta["gelu"] = "relu";
  EXPECT_THROW(backbone_options_from_metadata(tanh_meta), std::runtime_error);
}

// A training checkpoint's teacher blob holds backbone and head under prefixes: the
// backbone comes out exactly as export_backbone writes it, head left behind.
TEST(Weights, ABackboneIsExtractedFromAModelCheckpointWithoutItsHead) {
  torch::manual_seed(14);
  const auto o = small_tiny();
  FovealBackbone bb(o);
  torch::nn::Linear head(o.width, 7);
  const std::string teacher = save_modules({{"backbone", bb.get()}, {"head", head.get()}});
  EXPECT_EQ(extract_backbone(teacher, "backbone", o), export_backbone(*bb));
  auto wide = o;
  wide.width = 2 * o.width;
  try {
    extract_backbone(teacher, "backbone", wide);
    ADD_FAILURE() << "a backbone of another width was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape"), std::string::npos) << e.what();
  }
  EXPECT_THROW(extract_backbone(teacher, "student", o), std::runtime_error);  // no such prefix
}

TEST(Weights, MismatchedCheckpointsAreRefusedWithTheTensorNamed) {
  torch::manual_seed(13);
  FovealBackbone bb(small_tiny());
  const NamedModules target{{"backbone", bb.get()}};
  RawTensorMap raw = to_raw_tensors(target);
  const auto before = bb->named_parameters()["blocks.0.attn.qkv.weight"].clone();

  RawTensorMap wrong_shape = raw;
  auto& qkv = wrong_shape.at("backbone.blocks.0.attn.qkv.weight");
  qkv.shape = {qkv.shape[1], qkv.shape[0]};
  std::string error = load_error(target, serialize_safetensors(wrong_shape));
  EXPECT_NE(error.find("\"backbone.blocks.0.attn.qkv.weight\" has shape [192, 576]"),
            std::string::npos)
      << error;

  RawTensorMap missing = raw;
  missing.erase("backbone.norm.bias");
  error = load_error(target, serialize_safetensors(missing));
  EXPECT_NE(error.find("missing tensor \"backbone.norm.bias\""), std::string::npos) << error;

  RawTensorMap unexpected = raw;
  unexpected["backbone.extra"] = raw.at("backbone.norm.bias");
  error = load_error(target, serialize_safetensors(unexpected));
  EXPECT_NE(error.find("unexpected tensor \"backbone.extra\""), std::string::npos) << error;

  RawTensorMap wrong_dtype = raw;
  auto& st = wrong_dtype.at("backbone.state_embed");
  st.dtype = DType::kF64;
  st.data += st.data;  // keep the byte count consistent with F64
  error = load_error(target, serialize_safetensors(wrong_dtype));
  EXPECT_NE(error.find("\"backbone.state_embed\" has dtype F64"), std::string::npos) << error;

  // A whole model of another width is refused too, naming its first tensor.
  auto wide_o = small_tiny();
  wide_o.width = 256;
  wide_o.heads = 4;
  FovealBackbone wide(wide_o);
  error = load_error(target, save_modules({{"backbone", wide.get()}}));
  EXPECT_NE(error.find("has shape"), std::string::npos) << error;

  // Corrupted bytes are refused by the parser.
  std::string corrupt = serialize_safetensors(raw);
  corrupt[10] = '#';
  EXPECT_THROW(load_modules(target, corrupt), std::runtime_error);
  corrupt.resize(corrupt.size() - 1);
  EXPECT_THROW(load_modules(target, corrupt), std::runtime_error);

  // Nothing was modified by the refused loads.
  EXPECT_TRUE(torch::equal(bb->named_parameters()["blocks.0.attn.qkv.weight"], before));
}

}  // namespace
}  // namespace saccade::model
