#include "workers/ssl/step_flops.h"

#include <stdexcept>

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

}  // namespace saccade::ssl
