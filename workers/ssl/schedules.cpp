#include "workers/ssl/schedules.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace saccade::ssl {
namespace {

void require_non_negative(int64_t value, const char* name) {
  if (value < 0)
    throw std::invalid_argument(std::string(name) + " must be >= 0, got " + std::to_string(value));
}

}  // namespace

double cosine_schedule(double base, double final, int64_t total, int64_t warmup,
                       double warmup_start, int64_t step) {
  require_non_negative(step, "schedule step");
  require_non_negative(total, "schedule total steps");
  require_non_negative(warmup, "schedule warmup steps");
  if (step >= total) return final;
  if (step < warmup) {
    if (step == warmup - 1) return base;  // linspace's endpoint, exactly
    return warmup_start +
           (base - warmup_start) * static_cast<double>(step) / static_cast<double>(warmup - 1);
  }
  if (step == warmup) return base;  // cos(0) = 1, without rounding
  const double i = static_cast<double>(step - warmup);
  const double n = static_cast<double>(total - warmup);
  return final + 0.5 * (base - final) * (1.0 + std::cos(std::numbers::pi * i / n));
}

ScheduleValues schedule_at(const ScheduleOptions& o, int64_t step) {
  if (o.steps_per_epoch < 1)
    throw std::invalid_argument("steps_per_epoch must be >= 1, got " +
                                std::to_string(o.steps_per_epoch));
  require_non_negative(o.schedule_epochs, "schedule_epochs");
  require_non_negative(o.warmup_epochs, "warmup_epochs");
  require_non_negative(o.teacher_temp_warmup_epochs, "teacher_temp_warmup_epochs");
  require_non_negative(o.freeze_last_layer_epochs, "freeze_last_layer_epochs");
  const int64_t per_epoch = o.steps_per_epoch;
  const int64_t total = o.schedule_epochs * per_epoch;
  ScheduleValues v;
  v.lr = cosine_schedule(o.lr, o.min_lr, total, o.warmup_epochs * per_epoch, 0.0, step);
  v.weight_decay = cosine_schedule(o.weight_decay_start, o.weight_decay_end, total, 0, 0.0, step);
  v.teacher_momentum = cosine_schedule(o.momentum_start, o.momentum_end, total, 0, 0.0, step);
  const int64_t temp_steps = o.teacher_temp_warmup_epochs * per_epoch;
  v.teacher_temp = cosine_schedule(o.teacher_temp_end, o.teacher_temp_end, temp_steps, temp_steps,
                                   o.teacher_temp_start, step);
  v.last_layer_frozen = step < o.freeze_last_layer_epochs * per_epoch;
  v.last_layer_lr = v.last_layer_frozen ? 0.0 : v.lr;
  return v;
}

}  // namespace saccade::ssl
