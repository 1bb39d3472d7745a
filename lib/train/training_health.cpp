#include "lib/train/training_health.h"

#include <algorithm>
#include <cmath>

#include "lib/core/strings.h"

namespace magic {

void TrainingTrace::add(int64_t step, double loss, double update_norm, double learning_rate) {
  steps.push_back(step);
  losses.push_back(loss);
  update_norms.push_back(update_norm);
  learning_rates.push_back(learning_rate);
}

namespace {

double median(std::vector<double> values) {
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

// 1-based, as the progress lines count steps: "5, 6, 9 and 3 more".
std::string step_list(const std::vector<int64_t>& steps) {
  constexpr size_t kShown = 5;
  std::vector<std::string> shown;
  for (size_t k = 0; k < std::min(kShown, steps.size()); ++k) shown.push_back(std::to_string(steps[k] + 1));
  std::string list = join(shown, ", ");
  if (steps.size() > kShown) list += str_cat(" and ", steps.size() - kShown, " more");
  return list;
}

// Losses of a run gone wild reach 1e30: plain below 1e4, scientific above.
std::string value(double v) {
  return std::abs(v) < 1e4 ? format_fixed(v, 3) : format_sci(v, 1);
}

std::string ratio(double r) {
  return (r < 10 ? format_fixed(r, 1) : r < 1e4 ? format_fixed(r, 0) : format_sci(r, 1)) + "x";
}

}  // namespace

TrainingHealth judge_training(const TrainingTrace& trace) {
  TrainingHealth h;
  double lowest = INFINITY;
  int64_t lowest_step = -1;
  double worst_rise = 0;
  std::vector<double> history;  // update norm per unit learning rate of the steps so far
  for (size_t k = 0; k < trace.steps.size(); ++k) {
    const int64_t t = trace.steps[k];
    const double loss = trace.losses[k];
    if (std::isfinite(lowest) && lowest > 0 && loss > kLossSpike * lowest) {
      h.loss_spikes.push_back(t);
      if (loss / lowest > worst_rise) {
        worst_rise = loss / lowest;
        h.worst_loss_step = t;
        h.worst_loss = loss;
        h.lowest_loss_step = lowest_step;
        h.lowest_loss = lowest;
      }
    }
    if (loss < lowest) {
      lowest = loss;
      lowest_step = t;
    }
    // A step with learning rate 0 (the first of a warmup) moves by weight decay alone, if at all.
    if (!(trace.learning_rates[k] > 0)) continue;
    const double per_lr = trace.update_norms[k] / trace.learning_rates[k];
    if (static_cast<int64_t>(history.size()) >= kUpdateHistory) {
      const double typical = median(history);
      if (typical > 0 && per_lr > kUpdateJump * typical) {
        h.update_jumps.push_back(t);
        if (per_lr / typical > h.worst_jump) {
          h.worst_jump = per_lr / typical;
          h.worst_jump_step = t;
        }
      }
    }
    history.push_back(per_lr);
  }
  return h;
}

std::optional<std::string> non_smooth_warning(const TrainingTrace& trace) {
  const TrainingHealth h = judge_training(trace);
  if (h.smooth()) return std::nullopt;
  std::vector<std::string> seen;
  if (!h.loss_spikes.empty()) {
    seen.push_back(str_cat("the training loss spiked above ", format_fixed(kLossSpike, 1),
                           "x its lowest so far at step", h.loss_spikes.size() > 1 ? "s " : " ",
                           step_list(h.loss_spikes), " of ", trace.total_steps, " (worst ",
                           value(h.worst_loss), " at step ", h.worst_loss_step + 1, ", ",
                           ratio(h.worst_loss / h.lowest_loss), " the ", value(h.lowest_loss), " of step ",
                           h.lowest_loss_step + 1, ")"));
  }
  if (!h.update_jumps.empty()) {
    seen.push_back(str_cat("the update norm per unit learning rate jumped above ", format_fixed(kUpdateJump, 0),
                           "x its median so far at step", h.update_jumps.size() > 1 ? "s " : " ",
                           step_list(h.update_jumps), " of ", trace.total_steps, " (worst ", ratio(h.worst_jump),
                           " at step ", h.worst_jump_step + 1, ")"));
  }
  return str_cat("warning: training looks non-smooth: ", join(seen, "; "),
                 "; first-order scores may not predict retraining; check them with --validate lds");
}

}  // namespace magic
