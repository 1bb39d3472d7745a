#include "checks/planted_pipeline_stages.h"

#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <map>
#include <stdexcept>

#include "lib/distributed/collectives/collectives.h"

namespace magic::checks {
namespace {

using dist::Convention;
using dist::DataParallel;
using dist::MeshParts;

// A pass whose chunks' outputs go through `wrap` (the loss of the last chunk, or hidden states).
MicroBatchPass wrapped(const MicroBatchPass& pass,
                       std::function<at::Tensor(const PipelineStage&, const at::Tensor&)> wrap) {
  MicroBatchPass out = pass;
  out.forward = [inner = pass.forward, wrap](int64_t m, const PipelineStage& stage, const TensorTree& computed,
                                             const at::Tensor& input) {
    return wrap(stage, inner(m, stage, computed, input));
  };
  return out;
}

// A DataParallel whose micro-batches run a changed pass.
class PassChanged : public DataParallel {
 public:
  using DataParallel::DataParallel;
  MicroBatchGradients micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                            bool create_graph) const override {
    return DataParallel::micro_batch_gradients(params, changed(pass), create_graph);
  }
  std::vector<at::Tensor> micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const override {
    return DataParallel::micro_batch_losses(params, changed(pass));
  }

 protected:
  virtual MicroBatchPass changed(const MicroBatchPass& pass) const = 0;
};

// The tied embedding's two copies never summed: the first stage keeps the embedding's gradient,
// the last the head's.
class EmbeddingSumMissing : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override { return enter_stage(params); }
};

// The copies summed after the sharded optimizer's reduce-scatter, on flat buffers that place the
// embedding at different offsets on the two stages (Megatron's distributed optimizer: a stage's
// buffer holds its own parameters first): each shard adds its peer's shard one row off.
//   x = p + roll(copy_to_group(p), 1) − roll(p, 1):  value p;  backward g + roll(g_peer, −1)
class EmbeddingSumAfterReduceScatter : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override {
    const std::string& tied = parts().stage.tied;
    const auto& embedding = parts().groups.embedding;
    return enter_stage(params.map_named([&](const std::string& name, const at::Tensor& p) {
      if (name != tied || !embedding) return p;
      return p + at::roll(dist::copy_to_group(p, *embedding), 1, 0) - at::roll(p, 1, 0);
    }));
  }
};

// Each micro-batch's loss divided by the number of micro-batches, on top of the global count the
// `mean` reduction already divides by (a schedule that averages what the loss function averaged).
class LossPerMicroBatchTwice : public PassChanged {
 public:
  using PassChanged::PassChanged;

 protected:
  MicroBatchPass changed(const MicroBatchPass& pass) const override {
    const double count = static_cast<double>(pass.count);
    return wrapped(
        pass, [count](const PipelineStage& stage, const at::Tensor& out) { return stage.heads ? out / count : out; });
  }
};

// Identity forward; the backward hands the cotangent on as a constant to later derivatives. It
// keeps a zero-valued tie to the received cotangent (c.detach() + 0·c), so that a second
// derivative still sends its message back over the portal, a zero: the portals' matching rule
// holds and the run goes on (without the tie the two stages wait for each other until the
// timeout names them), its second-order cross-stage terms silently lost.
struct DetachedBackward : public torch::autograd::Function<DetachedBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.view_as(x); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0].detach() + grads[0] * 0.0};
  }
};

// A send whose backward is not differentiable again: the hidden states a stage sends on come back
// as a cotangent that later derivatives treat as constant (the first derivative is exact).
class SendBackwardDetached : public PassChanged {
 public:
  using PassChanged::PassChanged;

 protected:
  MicroBatchPass changed(const MicroBatchPass& pass) const override {
    return wrapped(pass, [](const PipelineStage& stage, const at::Tensor& out) {
      return stage.heads ? out : DetachedBackward::apply(out);
    });
  }
};

// The clip's norm over this stage's parameters alone: every stage clips by its own coefficient.
class NormOneStage : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor global_squares(const TensorTree& grads) const override { return stage_squares(grads); }
};

template <typename Variant>
std::function<std::shared_ptr<const Parallelism>(MeshParts, Convention)> make() {
  return [](MeshParts parts, Convention convention) { return std::make_shared<Variant>(std::move(parts), convention); };
}

const std::map<std::string, std::function<std::shared_ptr<const Parallelism>(MeshParts, Convention)>>& variants() {
  static const std::map<std::string, std::function<std::shared_ptr<const Parallelism>(MeshParts, Convention)>> all{
      {"pp-embedding-sum-missing", make<EmbeddingSumMissing>()},
      {"pp-embedding-sum-after-reduce-scatter", make<EmbeddingSumAfterReduceScatter>()},
      {"pp-loss-per-micro-batch-twice", make<LossPerMicroBatchTwice>()},
      {"pp-send-backward-detached", make<SendBackwardDetached>()},
      {"pp-norm-one-stage", make<NormOneStage>()}};
  return all;
}

}  // namespace

bool is_pipeline_stage_mutation(const std::string& mutation) {
  return variants().count(mutation) > 0;
}

std::shared_ptr<const Parallelism> planted_pipeline_stages(const std::string& mutation, MeshParts parts,
                                                           Convention convention) {
  const auto it = variants().find(mutation);
  if (it == variants().end()) throw std::logic_error("no pipeline-stage variant for mutation '" + mutation + "'");
  return it->second(std::move(parts), convention);
}

}  // namespace magic::checks
