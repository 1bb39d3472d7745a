#include "lib/distributed/parallel/pipeline_stage_runner.h"

#include <torch/csrc/autograd/autograd.h>

#include <map>

#include "lib/core/strings.h"
#include "lib/distributed/pools/portal.h"

namespace magic::dist {

PipelineStageResult run_pipeline_stage(const PipelineStageRun& run, const TensorTree& params,
                                       const ChunkForward& chunk_forward,
                                       const std::function<std::vector<int64_t>(int64_t m)>& hidden_shape,
                                       bool create_graph) {
  const int64_t chunks = run.pp * run.vpp, M = run.micro_batches;
  if (params.empty()) throw std::logic_error("run_pipeline_stage: a stage without parameters");
  if (run.pp > 1 && (run.group == nullptr || run.group->size() != run.pp)) {
    throw std::logic_error(str_cat("run_pipeline_stage: pp=", run.pp, " needs a pipeline group of that size"));
  }
  // The portal between chunk c and c + 1 for micro-batch m; derivative orders count up from it.
  auto portal = [&](int64_t m, int64_t c) { return PortalId{run.name, run.base_tag + 8 * (m * chunks + c)}; };
  const at::Tensor& anchor = params.begin()->tensor;
  PipelineStageResult out;
  out.gradients.assign(static_cast<size_t>(M), TensorTree());
  std::map<std::pair<int64_t, int64_t>, at::Tensor> outputs;  // (m, v): a send's token, or the loss
  std::map<std::pair<int64_t, int64_t>, TensorTree> grads;
  std::vector<at::Tensor> losses(static_cast<size_t>(M));
  for (const PipelineAction& a : pipeline_actions(run.schedule, run.pp, run.vpp, run.stage, M)) {
    const int64_t c = a.chunk * run.pp + run.stage;
    const auto key = std::make_pair(a.micro_batch, a.chunk);
    if (a.forward) {
      at::Tensor input;
      if (c > 0) {
        input = portal_recv(anchor, hidden_shape(a.micro_batch), *run.group, static_cast<int>((c - 1) % run.pp),
                            portal(a.micro_batch, c - 1));
      }
      const at::Tensor output = chunk_forward(a.micro_batch, a.chunk, input);
      if (c == chunks - 1) {
        outputs[key] = output;
        losses[static_cast<size_t>(a.micro_batch)] = output;
      } else {
        outputs[key] = portal_send(output, *run.group, static_cast<int>((c + 1) % run.pp), portal(a.micro_batch, c));
      }
      continue;
    }
    if (run.forward_only) continue;
    const at::Tensor target = outputs.at(key);
    TensorTree g = with_values(params, torch::autograd::grad({target}, params.tensors(), {}, create_graph, create_graph,
                                                             /*allow_unused=*/true));
    // A later pass that differentiates g must reach this send's backward (portal.h).
    if (create_graph && c < chunks - 1) g.at(params.begin()->name) = g.at(params.begin()->name) + 0.0 * target;
    grads[key] = std::move(g);
    outputs.erase(key);
  }
  // Each micro-batch's gradient: its chunks' in chunk order (a fixed order for every schedule).
  for (int64_t m = 0; m < M && !run.forward_only; ++m) {
    TensorTree sum = grads.at({m, 0});
    for (int64_t v = 1; v < run.vpp; ++v) sum = add(sum, grads.at({m, v}));
    out.gradients[static_cast<size_t>(m)] = std::move(sum);
  }
  if (run.stage == (chunks - 1) % run.pp) out.losses = std::move(losses);
  if (run.group != nullptr) wait_portal_sends(*run.group);
  return out;
}

}  // namespace magic::dist
