// DINOv2's hyper-parameter schedules as pure functions of the optimiser step
// (dinov2/utils/utils.py CosineScheduler and train.py build_schedulers). No torch.
#pragma once

#include <cstdint>

namespace saccade::ssl {

// DINOv2 CosineScheduler at `step`: `warmup` steps of np.linspace(warmup_start,
// base, warmup) (both ends included: step warmup-1 is exactly `base`), then
// final + 1/2 (base - final)(1 + cos(pi i / (total - warmup))) for
// i = step - warmup, and exactly `final` from step `total` on. Throws
// std::invalid_argument on step < 0, total < 0 or warmup < 0.
double cosine_schedule(double base, double final, int64_t total, int64_t warmup,
                       double warmup_start, int64_t step);

struct ScheduleOptions {
  int64_t steps_per_epoch = 1;
  // The cosines span schedule_epochs (appendix "Ablation Study": schedules may
  // run as if training were longer than it is).
  int64_t schedule_epochs = 100;
  double lr = 0.002;  // peak, used as is (no batch-size scaling)
  double min_lr = 1e-6;
  int64_t warmup_epochs = 10;
  double weight_decay_start = 0.04;
  double weight_decay_end = 0.4;
  double momentum_start = 0.992;
  double momentum_end = 1.0;
  double teacher_temp_start = 0.04;
  double teacher_temp_end = 0.07;
  int64_t teacher_temp_warmup_epochs = 30;  // then constant (independent of schedule_epochs)
  int64_t freeze_last_layer_epochs = 1;
};

struct ScheduleValues {
  double lr = 0;                // every parameter but the head's last layer
  double last_layer_lr = 0;     // lr, but 0 while the last layer is frozen
  double weight_decay = 0;      // for the decay group (the other group gets 0)
  double teacher_momentum = 0;  // EMA: teacher = m teacher + (1 - m) student
  double teacher_temp = 0;
  bool last_layer_frozen = false;
};

// Values for optimiser step `step` (0-based). Throws std::invalid_argument
// naming the field when options are out of range.
ScheduleValues schedule_at(const ScheduleOptions& options, int64_t step);

}  // namespace saccade::ssl
