#include "checks/rank_gradcheck.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/seed.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

at::Tensor own_input(const std::vector<at::Tensor>& inputs, RankSemantics semantics, int rank) {
  return semantics == RankSemantics::kReplicatedInput ? inputs[0] : inputs[rank];
}

}  // namespace

GradcheckResult rank_gradcheck(const dist::Group& group, const LocalTerm& local_term,
                               const std::vector<at::Tensor>& inputs, RankSemantics semantics, bool second_order,
                               const GradcheckOptions& opt) {
  const int rank = group.rank();
  // Directions for the second-order check, identical on every rank.
  std::vector<at::Tensor> directions;
  at::Generator gen = make_generator(derive_seed(opt.seed, "rank-gradcheck-directions"));
  for (const auto& x : inputs) directions.push_back(at::randn(x.sizes(), gen, x.options()));

  // This rank's term of the checked function, differentiable in `x`.
  auto term = [&](const at::Tensor& x) -> at::Tensor {
    if (!second_order) return local_term(x);
    at::Tensor g = torch::autograd::grad({local_term(x)}, {x}, {}, true, true, true)[0];
    if (!g.defined()) g = at::zeros_like(x);
    return (g * own_input(directions, semantics, rank)).sum();
  };
  // F (or S) at the given inputs, the same value on every rank.
  auto evaluate = [&](const std::vector<at::Tensor>& xs) {
    at::Tensor x = own_input(xs, semantics, rank).detach().clone().requires_grad_(true);
    at::Tensor value = term(x).detach().reshape({1}).clone();
    // Sum the ranks' values unless every rank already holds the one global value.
    const bool replicated = (semantics == RankSemantics::kReplicatedOutput && !second_order) ||
                            (semantics == RankSemantics::kReplicatedInput && second_order);
    if (!replicated) group.all_reduce_sum_(value);
    return value.item<double>();
  };

  // Numerical gradient of the global function, entry by entry, all ranks in lockstep.
  std::vector<at::Tensor> xs;
  for (const auto& x : inputs) xs.push_back(x.detach().clone());
  std::vector<at::Tensor> numeric;
  for (auto& x : xs) {
    at::Tensor flat = x.view({-1});
    at::Tensor column = at::zeros({flat.numel()}, at::kDouble);
    for (int64_t k = 0; k < flat.numel(); ++k) {
      const double original = flat[k].item<double>();
      flat[k] = original + opt.eps;
      const double plus = evaluate(xs);
      flat[k] = original - opt.eps;
      const double minus = evaluate(xs);
      flat[k] = original;
      column[k] = (plus - minus) / (2.0 * opt.eps);
    }
    numeric.push_back(column);
  }

  // Analytical: this rank's gradient through the collectives, gathered from every rank.
  at::Tensor x = own_input(xs, semantics, rank).detach().clone().requires_grad_(true);
  at::Tensor g = torch::autograd::grad({term(x)}, {x}, {}, false, false, true)[0];
  if (!g.defined()) g = at::zeros_like(x);
  std::vector<at::Tensor> analytic;
  if (semantics == RankSemantics::kReplicatedInput) {
    analytic.push_back(g.reshape({-1}).to(at::kDouble));
  } else {
    at::Tensor gathered = group.all_gather(g.reshape({1, -1}).contiguous(), 0);
    for (int r = 0; r < group.size(); ++r) analytic.push_back(gathered[r].to(at::kDouble));
  }

  GradcheckResult result;
  for (size_t i = 0; i < numeric.size(); ++i) {
    at::Tensor error = (analytic[i] - numeric[i]).abs();
    at::Tensor excess = error - (opt.atol + opt.rtol * numeric[i].abs());
    result.compared += error.numel();
    result.max_abs_error = std::max(result.max_abs_error, error.max().item<double>());
    const int64_t worst = excess.argmax().item<int64_t>();
    if (result.passed && excess[worst].item<double>() > 0) {
      result.passed = false;
      result.message = str_cat(second_order ? "second derivative" : "first derivative", " across ", group.size(),
                               " ranks: d/d(input of rank ", i, ")[", worst, "] analytical ",
                               format_sci(analytic[i][worst].item<double>(), 6), " vs numerical ",
                               format_sci(numeric[i][worst].item<double>(), 6), " (|difference| ",
                               format_sci(error[worst].item<double>(), 3), ")");
    }
  }
  return result;
}

}  // namespace magic::checks
