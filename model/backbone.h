// The foveal ViT backbone: one call of step() is one glimpse (or one ViT-mode
// pass over a global grid). Per-step compute depends on the token count only,
// never on the image size: the image is seen only through patches and their
// (x, y, z) positions.
#pragma once

#include <torch/torch.h>

#include "model/layers.h"
#include "model/options.h"

namespace saccade::model {

struct StepOutput {
  torch::Tensor state;  // [B, n_state, width]: final-LayerNorm outputs at the state positions
  torch::Tensor patch_tokens;  // [B, T, width]: final-LayerNorm outputs at the patch positions
  // [B, width]: state[:, 0] / ||state[:, 0]||, the input of KoLeo (DINOv2; docs/references.md).
  torch::Tensor first_state_normalized() const;
};

// Parameter names (see docs/model.md): patch_embed.{weight,bias}, pos_mlp.fc1/fc2,
// state_embed, blocks.<i>.{norm1,attn.qkv,attn.proj,ls1.gamma,norm2,mlp.fc1,mlp.fc2,ls2.gamma},
// norm.{weight,bias}.
class FovealBackboneImpl : public torch::nn::Module {
 public:
  explicit FovealBackboneImpl(const BackboneOptions& options);

  // patches:   [B, T, C, P, P] float, channel-major patches (pixel scaling is the caller's job)
  // positions: [B, T, 3] float (x, y, z): patch centre in short-side units (origin top-left,
  //            x right, y down) and zoom z (patch side = 2^-z)
  // state:     [B, n_state, width] from the previous step, or an undefined tensor for the
  //            initial (zero) state. It is DETACHED here: no backprop through time.
  // options.state_input: normed, the incoming state plus the learned state embedding
  // are the state tokens; projected, state_proj(incoming) plus the embedding; memory,
  // the state tokens start from the embedding alone and the incoming state plus
  // memory_embed follows them as n_state more tokens. The transformer runs over
  // [state tokens, (memory tokens,) patch tokens]; the new state is the normed
  // output at the state positions. gated: as memory, then the new state is
  // state + g * (new - state), g = sigmoid(state_gate([new, state])) per channel.
  StepOutput step(const torch::Tensor& patches, const torch::Tensor& positions,
                  const torch::Tensor& state = {});

  // A zero state [batch, n_state, width] on the module's device and dtype.
  torch::Tensor initial_state(int64_t batch) const;

  const BackboneOptions& options() const { return options_; }

 private:
  void check_inputs(const torch::Tensor& patches, const torch::Tensor& positions,
                    const torch::Tensor& state) const;

  BackboneOptions options_;
  torch::nn::Linear patch_embed_{nullptr};  // on the flattened C*P*P patch
  Mlp pos_mlp_{nullptr};                    // (x, y, z) -> width
  torch::Tensor state_embed_;               // [n_state, width]
  torch::nn::Linear state_proj_{nullptr};   // carried state -> width (projected only)
  torch::Tensor memory_embed_;              // [n_state, width] (memory and gated)
  torch::nn::Linear state_gate_{nullptr};   // [new, carried] 2*width -> width (gated only)
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(FovealBackbone);

}  // namespace saccade::model
