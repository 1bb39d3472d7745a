// Learning-rate schedules as functions of the optimizer's update count (read before it is
// incremented, as torchopt's scale_by_schedule does).
//   warmup (k < W):  lr(k) = peak · k / W
//   constant:        lr(k) = peak
//   linear:          lr(k) = peak + (final - peak) · (k - W) / (N - W)
//   cosine:          lr(k) = final + (peak - final) · (1 + cos(π (k - W) / (N - W))) / 2
// with N the total steps; for k >= N the schedule holds its final value.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/json_fields.h"

namespace magic {

struct LrSchedule {
  enum class Kind { kConstant, kLinear, kCosine };
  Kind kind = Kind::kConstant;
  double peak = 1e-3;
  double final_value = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double at(int64_t count) const;

  // {"name": "constant"|"linear"|"cosine", "warmup_steps": int | "warmup_fraction": x in [0,1),
  //  "final_lr": x}; `peak` and `total_steps` come from the optimizer and training config.
  static LrSchedule from_json(const JsonFields& fields, double peak, int64_t total_steps);
};

}  // namespace magic
