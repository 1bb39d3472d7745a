#include "lib/optim/schedule.h"

#include <cmath>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

double LrSchedule::at(int64_t count) const {
  if (count < warmup_steps) return peak * static_cast<double>(count) / static_cast<double>(warmup_steps);
  if (kind == Kind::kConstant) return peak;
  if (count >= total_steps) return final_value;
  const double progress = static_cast<double>(count - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  if (kind == Kind::kLinear) return peak + (final_value - peak) * progress;
  return final_value + (peak - final_value) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

LrSchedule LrSchedule::from_json(const JsonFields& f, double peak, int64_t total_steps) {
  LrSchedule s;
  s.peak = peak;
  s.total_steps = total_steps;
  const std::string name = f.string("name", "constant");
  if (name == "constant") {
    s.kind = Kind::kConstant;
  } else if (name == "linear") {
    s.kind = Kind::kLinear;
  } else if (name == "cosine") {
    s.kind = Kind::kCosine;
  } else {
    f.fail("name", str_cat("unknown schedule '", name, "'; expected one of constant, linear, cosine"));
  }
  s.final_value = f.number("final_lr", 0.0);
  if (f.has("warmup_steps") && f.has("warmup_fraction")) {
    f.fail("warmup_steps", "give warmup_steps or warmup_fraction, not both");
  }
  if (f.has("warmup_fraction")) {
    const double fraction = f.number("warmup_fraction");
    if (!(fraction >= 0.0 && fraction < 1.0))
      f.fail("warmup_fraction", str_cat("expected a value in [0, 1), got ", fraction));
    s.warmup_steps = static_cast<int64_t>(std::llround(fraction * static_cast<double>(total_steps)));
  } else {
    s.warmup_steps = f.integer("warmup_steps", 0);
  }
  if (s.warmup_steps < 0 || (s.warmup_steps >= total_steps && s.kind != Kind::kConstant)) {
    f.fail("warmup_steps", str_cat("expected 0 <= warmup < total steps ", total_steps, ", got ", s.warmup_steps));
  }
  f.finish();
  return s;
}

}  // namespace magic
