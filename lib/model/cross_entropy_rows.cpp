#include "lib/model/cross_entropy_rows.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

namespace magic {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kBlockElements = 1 << 17;  // a block's temporaries: 1 MiB each in fp64

// ⟨u, c⟩ a row: (1−ε)·u_t + (ε/V)·Σ_v u_v.
at::Tensor dot_target(const at::Tensor& u, const at::Tensor& targets, double eps) {
  at::Tensor picked = u.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  if (eps == 0.0) return picked;
  return (1.0 - eps) * picked + (eps / static_cast<double>(u.size(-1))) * u.sum(-1);
}

// The same as the ops of CrossEntropyRowsGrad::backward, a block of leading indices at a time, into
// the two results: REPLAY's product reaches this node with every other pending gradient alive,
// and whole-size temporaries (p, u·p, u − ⟨u, p⟩) would stack on them.
variable_list second_derivative_in_blocks(const at::Tensor& z, const at::Tensor& g, const at::Tensor& targets,
                                          double eps, const at::Tensor& u) {
  at::Tensor dz = at::empty(z.sizes(), z.options()), dg = at::empty(g.sizes(), g.options());
  const int64_t rows = z.size(0), per_row = std::max<int64_t>(z.numel() / std::max<int64_t>(rows, 1), 1);
  const int64_t block = std::max<int64_t>(kBlockElements / per_row, 1);
  for (int64_t first = 0; first < rows; first += block) {
    const int64_t n = std::min(block, rows - first);
    const at::Tensor zb = z.narrow(0, first, n), ub = u.narrow(0, first, n), gb = g.narrow(0, first, n);
    const at::Tensor p = at::softmax(zb, -1);
    const at::Tensor up = (ub * p).sum(-1);
    at::Tensor dgb = dg.narrow(0, first, n), out = dz.narrow(0, first, n);
    at::sub_out(dgb, up, dot_target(ub, targets.narrow(0, first, n), eps));
    at::sub_out(out, ub, up.unsqueeze(-1));
    out.mul_(p).mul_(gb.unsqueeze(-1));
  }
  return {dz, dg, at::Tensor(), at::Tensor()};
}

// (z, g) -> g·(p − c), the rows' gradient; its own derivative from ops on z.
struct CrossEntropyRowsGrad : public torch::autograd::Function<CrossEntropyRowsGrad> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& g, const at::Tensor& targets,
                            double eps) {
    ctx->save_for_backward({z, g, targets});
    ctx->saved_data["eps"] = eps;
    at::Tensor d = at::softmax(z, -1);
    if (eps != 0.0) d.sub_(eps / static_cast<double>(z.size(-1)));
    d.scatter_add_(-1, targets.unsqueeze(-1),
                   at::full({}, -(1.0 - eps), d.options()).expand(targets.unsqueeze(-1).sizes()));
    return d.mul_(g.unsqueeze(-1));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &z = s[0], &g = s[1], &targets = s[2], &u = grad[0];
    if (!u.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto batched = [](const at::Tensor& t) { return t.key_set().has(c10::DispatchKey::Batched); };
    if (at::GradMode::is_enabled() || batched(u) || z.dim() < 2) {
      const at::Tensor p = at::softmax(z, -1);
      const at::Tensor up = (u * p).sum(-1);
      return {g.unsqueeze(-1) * p * (u - up.unsqueeze(-1)), up - dot_target(u, targets, eps), at::Tensor(),
              at::Tensor()};
    }
    return second_derivative_in_blocks(z, g, targets, eps, u);
  }
};

struct CrossEntropyRows : public torch::autograd::Function<CrossEntropyRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& targets, double eps) {
    ctx->save_for_backward({z, targets});
    ctx->saved_data["eps"] = eps;
    return at::logsumexp(z, -1) - dot_target(z, targets, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    return {CrossEntropyRowsGrad::apply(s[0], grad[0], s[1], ctx->saved_data["eps"].toDouble()), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, double label_smoothing) {
  const bool fits = (logits.scalar_type() == at::kDouble || logits.scalar_type() == at::kFloat) && logits.dim() >= 1 &&
                    !logits.key_set().has(c10::DispatchKey::Batched);
  if (fits) return CrossEntropyRows::apply(logits, targets, label_smoothing);
  const at::Tensor log_probs = at::log_softmax(logits, -1);
  at::Tensor loss = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  if (label_smoothing == 0.0) return loss;  // ε = 0: the plain loss's operations, bit for bit
  const double V = static_cast<double>(logits.size(-1));
  return (1.0 - label_smoothing) * loss - (label_smoothing / V) * log_probs.sum(-1);
}

}  // namespace magic
