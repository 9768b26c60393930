#include "workers/ssl/step_flops.h"

#include <stdexcept>
#include <tuple>

namespace saccade::ssl {

SslStepFlops ssl_step_flops(const model::BackboneOptions& backbone,
                            const model::DinoHeadOptions& head, const SslViewShapes& v,
                            bool supervised) {
  if (v.global_tokens < 1 || v.local_tokens < 0 || v.local_views < 0 || v.glimpse_tokens < 1 ||
      v.glimpses < 1)
    throw std::invalid_argument("ssl_step_flops: a view shape is out of range");
  const int64_t head_token = model::dino_head_flops(head);
  // A sequential view: the first glimpse starts from the zero state, the others carry it.
  const int64_t sequence =
      model::step_flops(backbone, v.glimpse_tokens).forward() +
      (v.glimpses - 1) * model::step_flops(backbone, v.glimpse_tokens, true).forward();
  const int64_t global = model::step_flops(backbone, v.global_tokens).forward();
  SslStepFlops f;
  if (!supervised) f.teacher_forward = global + sequence + 2 * head_token;
  f.student_forward = global + sequence + (1 + v.local_views + v.glimpses) * head_token;
  if (v.local_views > 0)
    f.student_forward += v.local_views * model::step_flops(backbone, v.local_tokens).forward();
  return f;
}

std::vector<StepProduct> step_products(const model::BackboneOptions& backbone,
                                       const model::DinoHeadOptions& head, const SslViewShapes& v,
                                       int64_t batch, bool batched_glimpses, bool supervised) {
  ssl_step_flops(backbone, head, v, supervised);  // the same checks
  if (batch < 1) throw std::invalid_argument("step_products: expected a batch >= 1");
  std::vector<StepProduct> out;
  const int64_t w = backbone.width, hidden = backbone.mlp_hidden(), K = v.glimpses;
  const auto tokens = [&](int64_t patches, bool carries_state) {
    return model::step_flops(backbone, patches, carries_state).tokens;
  };
  // Every block's four products for a pass of `rows` token rows, `calls` times.
  const auto blocks = [&](const std::string& pass, int64_t rows, int64_t calls, bool backward,
                          bool model_flops = true) {
    if (rows < 1 || calls < 1) return;
    for (const auto& [layer, k, n] : {std::tuple<const char*, int64_t, int64_t>{"qkv", w, 3 * w},
                                      {"proj", w, w},
                                      {"fc1", w, hidden},
                                      {"fc2", hidden, w}})
      out.push_back({pass, layer, rows, k, n, calls * backbone.depth, backward, model_flops});
  };
  // The DINO head's products on `rows` tokens, `calls` times.
  const auto heads = [&](const std::string& pass, int64_t rows, int64_t calls, bool backward) {
    if (rows < 1 || calls < 1) return;
    for (const auto& [layer, k, n] :
         {std::tuple<const char*, int64_t, int64_t>{"head 1", head.in_dim, head.hidden_dim},
          {"head 2", head.hidden_dim, head.hidden_dim},
          {"head 3", head.hidden_dim, head.bottleneck_dim},
          {"prototypes", head.bottleneck_dim, head.n_prototypes}})
      out.push_back({pass, layer, rows, k, n, calls, backward, true});
  };
  const int64_t first = batch * tokens(v.glimpse_tokens, false),
                carried = batch * tokens(v.glimpse_tokens, true);
  if (!supervised) {  // no gradient; its head on the global view and the final glimpse
    blocks("teacher global", batch * tokens(v.global_tokens, false), 1, false);
    blocks("teacher glimpse 1", first, 1, false);
    blocks("teacher glimpses 2..K", carried, K - 1, false);
    heads("teacher head", batch, 2, false);
  }
  blocks("student global", batch * tokens(v.global_tokens, false), 1, true);
  heads("student global head", batch, 1, true);
  blocks("student local", v.local_views * batch * tokens(v.local_tokens, false), 1, true);
  heads("student local head", v.local_views * batch, 1, true);
  blocks("student glimpse 1", first, 1, true);
  heads("student glimpse head", batch, batched_glimpses ? 1 : K, true);
  if (batched_glimpses) {
    blocks("student carry", carried, K - 2, false, /*model_flops=*/false);
    blocks("student glimpses 2..K", (K - 1) * carried, 1, true);
    heads("student glimpses 2..K head", (K - 1) * batch, 1, true);
  } else {
    blocks("student glimpses 2..K", carried, K - 1, true);
  }
  return out;
}

}  // namespace saccade::ssl
