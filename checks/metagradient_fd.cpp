#include "checks/metagradient_fd.h"

#include <cmath>
#include <limits>

#include "lib/core/strings.h"
#include "lib/train/forward_training.h"

namespace magic::checks {

namespace {

DerivativeEstimate ridders_tableau(const std::function<double(double)>& f, double initial_step,
                                   const RiddersOptions& opt) {
  const int n = opt.max_columns;
  const double c2 = opt.shrink * opt.shrink;
  std::vector<std::vector<double>> table(n, std::vector<double>(n, 0.0));
  DerivativeEstimate best;
  best.error = std::numeric_limits<double>::infinity();
  double h = initial_step;
  auto central = [&](double step) {
    best.evaluations += 2;
    return (f(step) - f(-step)) / (2.0 * step);
  };
  table[0][0] = central(h);
  best.value = table[0][0];
  best.step = h;
  for (int i = 1; i < n; ++i) {
    h /= opt.shrink;
    table[0][i] = central(h);
    double factor = c2;
    // Row j extrapolates away the h^(2j) error term of row j-1.
    for (int j = 1; j <= i; ++j) {
      table[j][i] = (table[j - 1][i] * factor - table[j - 1][i - 1]) / (factor - 1.0);
      factor *= c2;
      const double error =
          std::max(std::abs(table[j][i] - table[j - 1][i]), std::abs(table[j][i] - table[j - 1][i - 1]));
      if (error <= best.error) {
        best.error = error;
        best.value = table[j][i];
        best.step = h;
      }
    }
    // Once higher order stops helping, round-off dominates: stop.
    if (std::abs(table[i][i] - table[i - 1][i - 1]) >= opt.give_up * best.error) break;
  }
  return best;
}

}  // namespace

DerivativeEstimate ridders_derivative(const std::function<double(double)>& f, const RiddersOptions& opt) {
  DerivativeEstimate best;
  best.error = std::numeric_limits<double>::infinity();
  int evaluations = 0;
  for (double h0 : opt.initial_steps) {
    DerivativeEstimate estimate = ridders_tableau(f, h0, opt);
    evaluations += estimate.evaluations;
    if (estimate.error < best.error) best = estimate;
  }
  best.evaluations = evaluations;
  return best;
}

double query_loss_after_training(const StepFunction& step, const QueryFunction& query, const TrainState& initial,
                                 const at::Tensor& w) {
  TrainState final_state = train_forward(step, initial, w, nullptr);
  at::NoGradGuard no_grad;
  return query.loss(final_state.params).item<double>();
}

ScoreFdComparison compare_scores_with_fd(const StepFunction& step, const QueryFunction& query,
                                         const TrainState& initial, const at::Tensor& w, const at::Tensor& scores,
                                         const std::vector<int64_t>& indices, double tolerance,
                                         const RiddersOptions& options) {
  ScoreFdComparison out;
  out.indices = indices;
  const at::Tensor flat_scores = scores.reshape({-1});
  for (int64_t index : indices) {
    auto perturbed = [&](double h) {
      at::Tensor wp = w.detach().clone();
      wp.view({-1})[index] += h;
      return query_loss_after_training(step, query, initial, wp);
    };
    DerivativeEstimate estimate = ridders_derivative(perturbed, options);
    const double analytic = flat_scores[index].item<double>();
    const double rel = std::abs(analytic - estimate.value) / std::max(std::abs(estimate.value), 1e-300);
    out.analytic.push_back(analytic);
    out.numeric.push_back(estimate.value);
    out.relative_errors.push_back(rel);
    out.max_relative_error = std::max(out.max_relative_error, rel);
    if (rel > tolerance && out.passed) {
      out.passed = false;
      out.message = str_cat("score of weight ", index, ": REPLAY ", format_sci(analytic, 9), " vs finite differences ",
                            format_sci(estimate.value, 9), " (Ridders error estimate ", format_sci(estimate.error, 2),
                            "), relative error ", format_sci(rel, 2), " > ", format_sci(tolerance, 1));
    }
  }
  return out;
}

}  // namespace magic::checks
