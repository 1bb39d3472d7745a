#include "lib/distributed/parallel/pipeline_micro_batches.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/distributed/parallel/ordered_gradient_sum.h"

namespace magic::dist {
namespace {

// The run for `pass`: its micro-batches, and GPipe where 1F1B cannot run them.
PipelineStageRun for_pass(PipelineStageRun run, const MicroBatchPass& pass) {
  run.micro_batches = pass.count;
  const bool fits = pass.count >= run.pp && (run.vpp == 1 || pass.count % run.pp == 0);
  if (!fits) run.schedule = PipelineSchedule::kGpipe;
  return run;
}

}  // namespace

MicroBatchGradients pipeline_micro_batch_gradients(PipelineStageRun run, const std::vector<PipelineStage>& chunks,
                                                   const TensorTree& params, const MicroBatchPass& pass,
                                                   bool create_graph) {
  run = for_pass(run, pass);
  // Differentiated to the entered parameters, in the reduce dtype: the micro-batches' sum is
  // accumulated there and never rounded to the compute dtype on its way to the reduction.
  const TensorTree entered = pass.enter(params);
  std::vector<at::Tensor> losses(static_cast<size_t>(pass.count));
  const PipelineStageResult result = run_pipeline_stage(
      run, entered,
      [&](int64_t m, int64_t v, const at::Tensor& input) {
        const PipelineStage& chunk = chunks.at(static_cast<size_t>(v));
        const TensorTree computed = pass.to_compute(entered);
        // Received in the anchor's (the entered parameters') dtype: the sender's values, exactly.
        const at::Tensor in = input.defined() ? input.to(computed.begin()->tensor.scalar_type()) : input;
        const at::Tensor out = pass.forward(m, chunk, computed, in);
        if (!chunk.heads) return out;
        losses[static_cast<size_t>(m)] = out.detach();
        return pass.scale_loss(out);
      },
      pass.hidden_shape, create_graph);
  // Σ_m in micro-batch order; differentiated again micro-batch by micro-batch.
  TensorTree sum;
  if (create_graph) {
    std::vector<at::Tensor> inputs = entered.tensors();
    inputs.insert(inputs.end(), pass.inputs.begin(), pass.inputs.end());
    sum = ordered_gradient_sum(result.gradients, inputs);
  } else {
    for (const TensorTree& g : result.gradients) sum = sum.empty() ? g : pass.accumulate(sum, g);
  }
  sum =
      sum.map_named([&](const std::string& name, const at::Tensor& g) { return g.to(entered.at(name).scalar_type()); });
  MicroBatchGradients out;
  out.gradient = with_values(params, torch::autograd::grad(entered.tensors(), params.tensors(), sum.tensors(),
                                                           /*retain_graph=*/create_graph, create_graph,
                                                           /*allow_unused=*/true));
  if (!result.losses.empty()) {  // the unscaled losses, on the stage of the last chunk
    out.loss = losses.front();
    for (size_t m = 1; m < losses.size(); ++m) out.loss = out.loss + losses[m];
  }
  return out;
}

std::vector<at::Tensor> pipeline_micro_batch_losses(PipelineStageRun run, const std::vector<PipelineStage>& chunks,
                                                    const TensorTree& params, const MicroBatchPass& pass) {
  run = for_pass(run, pass);
  run.forward_only = true;
  const at::NoGradGuard values_only;
  const TensorTree computed = pass.to_compute(pass.enter(params));
  const PipelineStageResult result = run_pipeline_stage(
      run, computed,
      [&](int64_t m, int64_t v, const at::Tensor& input) {
        return pass.forward(m, chunks.at(static_cast<size_t>(v)), computed, input);
      },
      pass.hidden_shape, /*create_graph=*/false);
  return result.losses;
}

}  // namespace magic::dist
