#include "lib/distributed/parallel/ordered_gradient_sum.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <memory>
#include <stdexcept>

namespace magic::dist {
namespace {

using torch::autograd::variable_list;

// The sum's backward: one nested autograd pass per micro-batch, in order, each from the
// micro-batch's gradient tensors (kept here with their graphs) to the sum's inputs.
struct OrderedSumBackward : torch::autograd::Node {
  std::vector<std::vector<at::Tensor>> parts;  // [m][output]: the entries that carry a graph
  variable_list inputs;

  variable_list apply(variable_list&& cotangents) override {
    const bool create_graph = at::GradMode::is_enabled();
    variable_list grad_outputs;
    for (size_t i = 0; i < cotangents.size(); ++i) {
      grad_outputs.push_back(cotangents[i].defined() ? cotangents[i] : at::zeros_like(parts.front()[i]));
    }
    variable_list total(inputs.size());
    for (const auto& part : parts) {
      variable_list outputs, outputs_cotangents;
      for (size_t i = 0; i < part.size(); ++i) {
        if (!part[i].requires_grad()) continue;  // a micro-batch that does not reach this entry
        outputs.push_back(part[i]);
        outputs_cotangents.push_back(grad_outputs[i]);
      }
      if (outputs.empty()) continue;
      const variable_list g = torch::autograd::grad(outputs, inputs, outputs_cotangents, /*retain_graph=*/true,
                                                    create_graph, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) {
        if (g[k].defined()) total[k] = total[k].defined() ? total[k] + g[k] : g[k];
      }
    }
    return total;
  }
};

}  // namespace

TensorTree ordered_gradient_sum(const std::vector<TensorTree>& parts, const std::vector<at::Tensor>& inputs) {
  if (parts.empty()) throw std::logic_error("ordered_gradient_sum: no parts");
  // The entries whose gradient carries a graph go through the node; the others are plain sums.
  std::vector<std::string> graphed;
  for (const auto& e : parts.front()) {
    if (e.tensor.requires_grad()) graphed.push_back(e.name);
  }
  auto node = std::shared_ptr<OrderedSumBackward>(new OrderedSumBackward(), torch::autograd::deleteNode);
  for (const auto& part : parts) {
    std::vector<at::Tensor> row;
    for (const auto& name : graphed) row.push_back(part.at(name));
    node->parts.push_back(std::move(row));
  }
  for (const auto& input : inputs) {
    if (input.requires_grad()) node->inputs.push_back(input);
  }
  node->set_next_edges(torch::autograd::collect_next_edges(node->inputs));
  return parts.front().map_named([&](const std::string& name, const at::Tensor&) {
    at::Tensor sum;
    {
      const at::NoGradGuard no_grad;
      for (const auto& part : parts) sum = sum.defined() ? sum + part.at(name) : part.at(name).clone();
    }
    if (parts.front().at(name).requires_grad()) torch::autograd::set_history(sum, node);
    return sum;
  });
}

}  // namespace magic::dist
