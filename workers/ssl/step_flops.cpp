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

std::vector<StepPass> step_passes(const model::BackboneOptions& backbone,
                                  const model::DinoHeadOptions& head, const SslViewShapes& v,
                                  int64_t batch, bool batched_glimpses, bool supervised) {
  ssl_step_flops(backbone, head, v, supervised);  // the same checks
  if (batch < 1) throw std::invalid_argument("step passes: expected a batch >= 1");
  const auto tokens = [&](int64_t patches, bool carries_state) {
    return model::step_flops(backbone, patches, carries_state).tokens;
  };
  const int64_t K = v.glimpses, global = tokens(v.global_tokens, false),
                first = tokens(v.glimpse_tokens, false), carried = tokens(v.glimpse_tokens, true);
  std::vector<StepPass> out;
  const auto add = [&](const char* name, int64_t sequences, int64_t n, int64_t calls, bool backward,
                       int64_t head_rows, int64_t head_calls, bool model_flops = true) {
    if (sequences > 0 && calls > 0)
      out.push_back({name, sequences, n, calls, backward, model_flops, head_rows, head_calls});
  };
  if (!supervised) {  // no gradient; its head on the global view and the final glimpse
    add("teacher global", batch, global, 1, false, batch, 2);
    add("teacher glimpse 1", batch, first, 1, false, 0, 0);
    add("teacher glimpses 2..K", batch, carried, K - 1, false, 0, 0);
  }
  add("student global", batch, global, 1, true, batch, 1);
  add("student local", v.local_views * batch, tokens(v.local_tokens, false), 1, true,
      v.local_views * batch, 1);
  add("student glimpse 1", batch, first, 1, true, batch, batched_glimpses ? 1 : K);
  if (batched_glimpses) {
    add("student carry", batch, carried, K - 2, false, 0, 0, /*model_flops=*/false);
    add("student glimpses 2..K", (K - 1) * batch, carried, 1, true, (K - 1) * batch, 1);
  } else {
    add("student glimpses 2..K", batch, carried, K - 1, true, 0, 0);
  }
  return out;
}

std::vector<StepProduct> step_products(const model::BackboneOptions& backbone,
                                       const model::DinoHeadOptions& head, const SslViewShapes& v,
                                       int64_t batch, bool batched_glimpses, bool supervised) {
  std::vector<StepProduct> out;
  const int64_t w = backbone.width, hidden = backbone.mlp_hidden();
  for (const StepPass& p : step_passes(backbone, head, v, batch, batched_glimpses, supervised)) {
    const int64_t rows = p.sequences * p.tokens;
    for (const auto& [layer, k, n] : {std::tuple<const char*, int64_t, int64_t>{"qkv", w, 3 * w},
                                      {"proj", w, w},
                                      {"fc1", w, hidden},
                                      {"fc2", hidden, w}})
      out.push_back(
          {p.name, layer, rows, k, n, p.calls * backbone.depth, p.backward, p.model_flops});
    if (p.head_calls < 1) continue;
    for (const auto& [layer, k, n] :
         {std::tuple<const char*, int64_t, int64_t>{"head 1", head.in_dim, head.hidden_dim},
          {"head 2", head.hidden_dim, head.hidden_dim},
          {"head 3", head.hidden_dim, head.bottleneck_dim},
          {"prototypes", head.bottleneck_dim, head.n_prototypes}})
      out.push_back({p.name + " head", layer, p.head_rows, k, n, p.head_calls, p.backward, true});
  }
  return out;
}

}  // namespace saccade::ssl
