// Building blocks shared by the backbone, the transformer task head and the
// gaze policy: a DINOv2-style pre-norm transformer block. Parameter names
// follow DINOv2/timm (norm1, attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1,
// mlp.fc2, ls2.gamma) so exported weights map one to one onto a PyTorch ViT.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>

#include "model/options.h"

namespace saccade::model {

// trunc_normal(std) on weights of every Linear under `module`, zero biases,
// LayerNorm = (1, 0): the timm / DINOv2 initialisation.
void init_vit_weights(torch::nn::Module& module, double std = 0.02);

// Samples N(0, std) truncated to [-2 std, 2 std] in place (timm's trunc_normal_).
void trunc_normal_(torch::Tensor tensor, double std);

// x W^T + b with `layer`'s weights through ATen's linear, which multiplies an input of any
// rank with contiguous rows as one matrix and adds the bias inside the product (cuBLASLt's
// epilogue on a GPU; fused_linear.h: and the bias gradient inside the weight gradient's).
// torch::nn::Linear's forward multiplies a 3-d input and then adds the bias in a kernel of its own:
// an activation-sized read and write per layer, and with bf16 activations and fp32 biases under
// autocast a slow mixed-type one.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);

// LayerScale folded into the linear layer before it (default) or applied to its output,
// for the whole process: off exists for A/B measurements (`saccade bench step`).
void set_folded_layerscale(bool enabled);
bool folded_layerscale();

// Within its scope, on this thread, each folded LayerScale computes its folded weight and
// bias once per grad mode and reuses them in every pass: for a training step's forward
// passes, where the weights do not change (at the paper's views some 1,100 weight-sized
// products a step fewer). Never across a weight update; and not inside a CUDA graph's
// capture, which must compute them from the weights it reads in place at every replay:
// ReuseFoldedLayerScale(false) turns reuse off for a scope. Scopes nest.
class ReuseFoldedLayerScale {
 public:
  explicit ReuseFoldedLayerScale(bool on = true);
  ~ReuseFoldedLayerScale();  // the outermost scope drops what was kept
  ReuseFoldedLayerScale(const ReuseFoldedLayerScale&) = delete;
  ReuseFoldedLayerScale& operator=(const ReuseFoldedLayerScale&) = delete;

 private:
  bool previous_;
};

// A linear layer's weight and bias, as used (a LayerScale folded into them, or the layer's own).
struct LinearWeights {
  torch::Tensor weight, bias;
};

class MlpImpl : public torch::nn::Module {
 public:
  using Gelu = BackboneOptions::Gelu;
  MlpImpl(int64_t in_dim, int64_t hidden_dim, int64_t out_dim, Gelu gelu = Gelu::kErf);
  torch::Tensor forward(const torch::Tensor& x);  // fc2(gelu(fc1(x)))
  // The same with `fc2` in place of fc2's weights (fc2's with a LayerScale folded in), as one
  // operation that fuses on a GPU (fused_linear.h).
  torch::Tensor forward_with_fc2(const torch::Tensor& x, const LinearWeights& fc2);
  const torch::nn::Linear& fc2() const { return fc2_; }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
  Gelu gelu_;
};
TORCH_MODULE(Mlp);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t width, int64_t heads);
  torch::Tensor forward(const torch::Tensor& x);  // [B, N, width] -> [B, N, width]
  torch::Tensor mix(const torch::Tensor& x);      // the heads' outputs: forward without proj
  const torch::nn::Linear& proj() const { return proj_; }

 private:
  int64_t heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(Attention);

// y = gamma * x with a learned per-channel gamma (DINOv2's LayerScale).
class LayerScaleImpl : public torch::nn::Module {
 public:
  LayerScaleImpl(int64_t width, double init_value);
  torch::Tensor forward(const torch::Tensor& x) { return x * gamma_; }
  // forward(linear(x)), computed as x through the linear with gamma folded into its weight
  // and bias: a product of weight size instead of activation size, in forward and in
  // backward, and one elementwise kernel fewer each way. The same function; gamma's
  // gradient sums the same products in another order.
  torch::Tensor of_linear(const torch::nn::Linear& linear, const torch::Tensor& x);
  // The linear layer's weight and bias with gamma folded in (kept within a
  // ReuseFoldedLayerScale scope): what of_linear multiplies x by when folding is on.
  LinearWeights folded(const torch::nn::Linear& linear);
  void forget_folded();  // drops the folded weights kept by ReuseFoldedLayerScale

 private:
  struct Folded {
    std::uint64_t scope = 0;  // the ReuseFoldedLayerScale scope they were computed in
    LinearWeights weights;
  };
  torch::Tensor gamma_;
  std::array<Folded, 2> folded_;  // by grad mode (off, on)
};
TORCH_MODULE(LayerScale);

// The residual stream between blocks: x, and the last branch's output not yet added to it,
// so that the add runs with the next LayerNorm as one operation (add_norm.h).
struct Residual {
  torch::Tensor x;
  torch::Tensor pending;  // undefined: nothing to add
};

// x + ls1(attn(norm1(x))), then + ls2(mlp(norm2(x))).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t width, int64_t heads, int64_t mlp_hidden, double layerscale_init,
            double norm_eps, BackboneOptions::Gelu gelu = BackboneOptions::Gelu::kErf);
  torch::Tensor forward(torch::Tensor x);
  // The same, leaving the MLP branch's output pending for the next block's norm1 (or the
  // stack's final LayerNorm) to add.
  Residual forward_residual(const Residual& in);

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  Attention attn_{nullptr};
  LayerScale ls1_{nullptr}, ls2_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace saccade::model
