#include "lib/compare/finite_rows.h"

#include <c10/util/accumulate.h>

#include "lib/core/non_finite.h"
#include "lib/core/strings.h"

namespace magic {

std::optional<std::string> non_finite_text(const std::string& what, const at::Tensor& tensor,
                                           const StepShape& step_shape) {
  const int64_t step_numel = c10::multiply_integers(step_shape);
  const bool by_step = !step_shape.empty() && step_numel > 0 && tensor.numel() % step_numel == 0;
  if (!by_step) {
    const auto where = describe_non_finite(tensor);
    if (!where) return std::nullopt;
    return str_cat(what, " is not finite (", *where, ")");
  }
  if (tensor.detach().isfinite().all().item<bool>()) return std::nullopt;
  // The first step holding a non-finite entry is described in its own shape; later ones listed.
  const at::Tensor steps = tensor.detach().reshape({-1, step_numel});
  std::string first;
  std::vector<std::string> later;
  for (int64_t t = 0; t < steps.size(0); ++t) {
    const auto where = describe_non_finite(steps[t].reshape(step_shape));
    if (!where) continue;
    if (first.empty()) {
      first = str_cat(what, " is not finite at step ", t, " (", *where, ")");
    } else {
      later.push_back(std::to_string(t));
    }
  }
  if (first.empty()) return std::nullopt;
  if (!later.empty()) first += str_cat(", also at step", later.size() > 1 ? "s " : " ", join(later, ", "));
  return first;
}

std::optional<std::string> non_finite_diagnosis(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                                const StepShape& step_shape) {
  std::vector<std::string> texts;
  for (const auto& [what, tensor] : tensors) {
    if (auto text = non_finite_text(what, tensor, step_shape)) texts.push_back(std::move(*text));
  }
  if (texts.empty()) return std::nullopt;
  return join(texts, "; ");
}

}  // namespace magic
