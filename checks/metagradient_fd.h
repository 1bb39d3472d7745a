// Metagradient finite differences: the independent oracle for everything. Each evaluation
// retrains from scratch with one data weight perturbed, Q(w + h e_i), and the derivative is
// estimated by Ridders' extrapolation of central differences
//   D(h) = (Q(w + h e_i) - Q(w - h e_i)) / 2h,  h_k = h_0 / c^k,
// a Richardson tableau over k that also yields an error estimate. A fixed step is fragile here:
// Adam's update is stiff where v is near 0, so a step that suits SGD can be 30% off for Adam
// while a smaller one agrees to 1e-7; the tableau finds the range where the estimates agree.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lib/step/step_function.h"

namespace magic::checks {

struct RiddersOptions {
  // One tableau per starting step (a sweep); the estimate with the smallest error wins.
  std::vector<double> initial_steps{1e-1, 1e-2, 1e-3, 1e-4};
  double shrink = 1.4;  // c: each column divides the step by c
  int max_columns = 10;
  double give_up = 2.0;  // stop a tableau once its diagonal moves more than give_up x its best error
};

struct DerivativeEstimate {
  double value = 0.0;
  double error = 0.0;  // Ridders' own error estimate
  double step = 0.0;   // the step of the column that gave `value`
  int evaluations = 0;
};

// f(h) is the function at x + h; returns the estimate of f'(x) with the smallest error estimate
// over the sweep of starting steps.
DerivativeEstimate ridders_derivative(const std::function<double(double)>& f, const RiddersOptions& options = {});

// Q(θ_N(w)) after plain (untraced, no checkpoints) training with weights w.
double query_loss_after_training(const StepFunction& step, const QueryFunction& query, const TrainState& initial,
                                 const at::Tensor& w);

struct ScoreFdComparison {
  std::vector<int64_t> indices;  // flat indices into w
  std::vector<double> analytic, numeric, relative_errors;
  double max_relative_error = 0.0;
  bool passed = true;
  std::string message;
};

// Compares scores[i] with finite differences of retraining at each flat index i of w;
// relative error |a - n| / |n| must stay within `tolerance`.
ScoreFdComparison compare_scores_with_fd(const StepFunction& step, const QueryFunction& query,
                                         const TrainState& initial, const at::Tensor& w, const at::Tensor& scores,
                                         const std::vector<int64_t>& indices, double tolerance,
                                         const RiddersOptions& options = {});

}  // namespace magic::checks
