#include "checks/mutations.h"

#include <cmath>
#include <map>
#include <optional>

#include "checks/check_settings.h"
#include "checks/lm_pipelines.h"
#include "checks/planted_bridge.h"
#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/train/checkpoint_schedule.h"

namespace magic::checks {

const std::vector<Mutation>& mutation_catalog() {
  constexpr auto kMesh = dist::TopologyFamily::kMesh;
  constexpr auto kThreePool = dist::TopologyFamily::kThreePool;
  static const std::vector<Mutation> catalog{
      {"avg-on-uneven-shards",
       "local mean and AVG reduction on shards of unequal size (the AVG convention's blind spot)",
       "grad",
       "",
       kMesh,
       {{"dp", 2}}},
      {"local-normalizer",
       "SUM reduction of losses normalized by each rank's own count instead of the global one",
       "grad",
       "x dp",
       kMesh,
       {{"dp", 2}},
       {{"cp", 1}}},
      {"missing-reduce",
       "the gradient is never summed across the ranks that hold the same parameters",
       "grad",
       "",
       kMesh,
       {{"holders", 2}}},
      {"replicated-allreduce-backward",
       "the replicated gradient comes out of all_reduce_sum, whose backward sums the cotangent once per rank",
       "hvp",
       "x dp",
       kMesh,
       {{"dp", 2}},
       // Under sp the parameters replicated over tp reduce over dp·tp ranks, the rest over dp: no one factor.
       {{"cp", 1}, {"fsdp", 1}, {"sp", 0}}},
      {"detached-collective",
       "the gradient is summed outside autograd (DDP-hook style): second-order cross-rank terms are lost",
       "hvp",
       "",
       kMesh,
       {{"holders", 2}}},
      {"extra-divide-scores", "the assembled scores are divided by dp once more", "replay", "1/dp", kMesh, {{"dp", 2}}},
      {"token-weight-shifted",
       "on odd dp ranks REPLAY's dQ/dw lands one token later (a per-token weight misaligned with its label): "
       "training and every first-order row are exact, the scores move to the wrong tokens",
       "replay",
       "",
       kMesh,
       {{"dp", 2}}},
      {"micro-batch-normalization",
       "each micro-batch's loss is a mean over its own valid labels and the means are averaged over the "
       "micro-batches (exact only where every micro-batch holds the same share of the labels)",
       "grad",
       "",
       kMesh,
       {{"mb", 2}}},
      {"cp-dp-only-normalizer",
       "the loss is normalized by the valid-label count over dp only, not dp*cp",
       "grad",
       "x cp",
       kMesh,
       {{"cp", 2}}},
      {"cp-kv-grad-not-summed",
       "the K/V all-gather's backward keeps only the local chunk's cotangent",
       "grad",
       "",
       kMesh,
       {{"cp", 2}},
       {{"ring", 0}}},
      {"ring-cotangent-onward",
       "ring attention's backward passes each K/V block's cotangent on around the ring instead of back to its "
       "owner: the output and dQ are right, every rank's dK and dV wrong",
       "grad",
       "",
       kMesh,
       {{"cp", 2}, {"ring", 1}}},
      {"ring-backward-reuses-first-block",
       "ring attention's backward recomputes every ring step with the first block's K/V (its own): the output is "
       "right, dQ is wrong and the other blocks' dK/dV are never sent home",
       "grad",
       "",
       kMesh,
       {{"cp", 2}, {"ring", 1}}},
      {"cp-contiguous-chunks",
       "contiguous sequence chunks while the mask and positions assume zig-zag",
       "grad",
       "",
       kMesh,
       {{"cp", 2}}},
      {"cp-local-positions", "position ids restart at 0 on every cp rank", "grad", "", kMesh, {{"cp", 2}}},
      {"fsdp-avg-and-divide",
       "the shards' reduce-scatter averages (a 1/fsdp divide) where it must sum",
       "grad",
       "1/fsdp",
       kMesh,
       {{"fsdp", 2}}},
      {"fsdp-gather-once-differentiable",
       "the parameter all-gather's backward runs outside autograd: first derivatives right, second order lost",
       "hvp",
       "",
       kMesh,
       {{"fsdp", 2}}},
      {"hsdp-missing-replica-reduce",
       "shard gradients reduced within their shard group but not across replicas",
       "grad",
       "",
       kMesh,
       {{"fsdp", 2}, {"replicas", 2}}},
      {"tp-row-bias-per-rank",
       "a row-parallel linear's bias is added on every tp rank before the sum: counted tp times",
       "grad",
       "",
       kMesh,
       {{"tp", 2}}},
      {"tp-column-backward-not-summed",
       "a column-parallel linear is entered through a plain identity: its input's gradient is not all-reduced "
       "across tp",
       "grad",
       "",
       kMesh,
       {{"tp", 2}},
       {{"sp", 0}}},
      {"tp-loss-max-local",
       "the vocabulary-parallel cross-entropy shifts by each rank's own max, not the all-reduced one",
       "grad",
       "",
       kMesh,
       {{"tp", 2}},
       {},
       PrecisionNeed::kResolvesTinyErrors},
      {"tp-loss-sum-exp-local",
       "the vocabulary-parallel cross-entropy's sum of exponentials is not all-reduced across tp",
       "grad",
       "",
       kMesh,
       {{"tp", 2}}},
      {"tp-loss-target-logit-local",
       "the vocabulary-parallel cross-entropy's target logit is not all-reduced across tp: the loss's value is "
       "wrong, and dQ/dw with it; every parameter gradient exact",
       "grad",
       "",
       kMesh,
       {{"tp", 2}},
       {},
       PrecisionNeed::kResolvesTinyErrors},
      {"tp-smoothing-local-vocabulary",
       "label smoothing's sum over the vocabulary takes this tp rank's shard only: the loss's value is wrong, and "
       "dQ/dw with it; every parameter gradient exact",
       "grad",
       "",
       kMesh,
       {{"tp", 2}},
       {},
       PrecisionNeed::kResolvesTinyErrors,
       false,
       false,
       /*needs_label_smoothing=*/true},
      {"tp-norm-replicated-per-rank",
       "the clip norm counts every replicated parameter once per tp rank",
       "optimizer",
       "",
       kMesh,
       {{"tp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"tp-norm-one-rank",
       "the clip norm of tensor-parallel pieces is this rank's only (no sum across tp)",
       "optimizer",
       "",
       kMesh,
       {{"tp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"tp-weight-gradient-summed",
       "REPLAY's dQ/dw is summed over the tp ranks too, though each holds all of it",
       "replay",
       "x tp",
       kMesh,
       {{"tp", 2}}},
      {"sp-replicated-gradient-not-summed",
       "under sp the replicated parameters' partial gradients (layer norms, positions, row-parallel biases) are not "
       "all-reduced across tp: the replicas drift",
       "grad",
       "",
       kMesh,
       {{"tp", 2}, {"sp", 1}}},
      {"sp-gather-backward-local",
       "under sp the sequence all-gather's backward keeps this rank's shard of the cotangent instead of "
       "reduce-scattering",
       "grad",
       "",
       kMesh,
       {{"tp", 2}, {"sp", 1}}},
      {"avg-ci-reduce",
       "the CI pool averages its gradient reduction instead of summing",
       "grad",
       "1/n_ci",
       kThreePool,
       {{"n_ci", 2}}},
      {"prescale-ci",
       "the gates' consumers pre-scale their cotangent by n_ci, for an AVG the CI pool does not do",
       "grad",
       "x n_ci",
       kThreePool,
       {{"n_ci", 2}}},
      {"faith-on-all-ranks",
       "every block rank adds the replicated faithfulness term, not only the block leader",
       "grad",
       "x n_per_block",
       kThreePool,
       {{"n_per_block", 2}}},
      {"avg-block-reduce",
       "each block averages its gradient reduction instead of summing",
       "grad",
       "1/n_per_block",
       kThreePool,
       {{"n_per_block", 2}}},
      {"global-sum-allreduce-backward",
       "every CI rank adds the importance term of the all-reduced global sum: its backward counts it n_ci times",
       "grad",
       "x n_ci",
       kThreePool,
       {{"n_ci", 2}}},
      {"detached-global-residual",
       "the importance term's global sum as local + detached residual: exact first derivatives, second-order "
       "cross-rank terms lost",
       "hvp",
       "",
       kThreePool,
       {{"n_ci", 2}},
       {},
       PrecisionNeed::kResolvesTinyErrors},
      {"ppgd-broadcast-all-ranks",
       "each PPGD rank returns the pool's summed V/U cotangent instead of its own",
       "grad",
       "x n_ppgd",
       kThreePool,
       {{"n_ppgd", 2}}},
      {"fp16-loss-scale-not-unscaled",
       "the gradients keep the fp16 loss scale: the update and clipping see S*g",
       "grad",
       "x loss_scale",
       std::nullopt,
       {},
       {},
       PrecisionNeed::kLossScale},
      {"fp16-unscale-twice",
       "the gradients are divided by the loss scale twice",
       "grad",
       "1/loss_scale",
       std::nullopt,
       {},
       {},
       PrecisionNeed::kLossScale},
      {"reduce-in-compute-dtype",
       "the policy says reduce in the master dtype; the code casts gradients to the compute dtype for the sum",
       "grad",
       "",
       kMesh,
       {{"world", 2}},
       {},
       PrecisionNeed::kReduceInMaster},
      {"master-weights-in-compute-dtype",
       "the update is applied to weights stored in the compute dtype (no master copy)",
       "final_params",
       "",
       std::nullopt,
       {},
       {},
       PrecisionNeed::kLowPrecision},
      {"accumulate-in-compute-dtype",
       "the micro-batches' gradients are accumulated in the compute dtype (a bf16 buffer) where the policy says "
       "master",
       "grad",
       "",
       kMesh,
       {{"mb", 2}},
       // With pp the micro-batches are summed before the step's one reduction: the reduction rows'
       // terms are the sums, and the coarse sum is within the compute dtype's own error (a gap,
       // docs/magic-check.md).
       {{"pp", 1}},
       PrecisionNeed::kReduceInMaster},
      {"fp16-predivide-underflow",
       "each rank's unscaled gradient is divided by the world size in fp16 before the SUM (small ones underflow)",
       "grad",
       "",
       kMesh,
       {{"world", 2}},
       {},
       PrecisionNeed::kFp16},
      {"clip-local-norm",
       "the clip coefficient is computed from this rank's local, unreduced gradient norm",
       "optimizer",
       "",
       kMesh,
       {{"world", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"clip-shard-norm-not-reduced",
       "the clip norm of sharded gradients sums this rank's shard only (its all-reduce over the shard group is "
       "missing)",
       "optimizer",
       "",
       kMesh,
       {{"fsdp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"clip-norm-detached",
       "the clip coefficient's norm is detached (computed as under no_grad): training is exact, REPLAY loses dc/dtheta",
       "replay",
       "",
       kMesh,
       {},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"bridge-clip-squares-all-reduced",
       "each side of a bridge all-reduces its shards' ||g||^2 with an all-reduce backward and scales its shards by c "
       "as they are (right for one mesh): in the joint norm each side's backward sums the other side's share of "
       "dc/dtheta over its own shard group",
       "replay",
       "",
       kMesh,
       {{"bridge", 1}, {"enc_fsdp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"pp-embedding-sum-missing",
       "a tied head's two copies of the token embedding (first and last pipeline stage) are never summed over the "
       "embedding group: each keeps its own part of the gradient",
       "grad",
       "",
       kMesh,
       {{"pp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/false,
       /*needs_later_checkpoint=*/false,
       /*needs_label_smoothing=*/false,
       /*ends_the_run=*/false,
       /*needs_tied_head=*/true},
      {"pp-embedding-sum-after-reduce-scatter",
       "the tied embedding's copies are summed after the sharded optimizer's reduce-scatter, on flat buffers that "
       "place the embedding at different offsets on the two stages: each shard adds its peer's shard one row off",
       "grad",
       "",
       kMesh,
       {{"pp", 2}, {"fsdp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/false,
       /*needs_later_checkpoint=*/false,
       /*needs_label_smoothing=*/false,
       /*ends_the_run=*/false,
       /*needs_tied_head=*/true},
      {"pp-loss-per-micro-batch-twice",
       "the last stage divides each micro-batch's loss by the number of micro-batches on top of the global count "
       "the mean already divides by",
       "grad",
       "1/mb",
       kMesh,
       {{"pp", 2}, {"mb", 2}}},
      {"pp-send-backward-detached",
       "a stage's send of its hidden states has a backward that is not differentiable again: every gradient is "
       "exact, the HVP and REPLAY lose the cross-stage second-order terms",
       "hvp",
       "",
       kMesh,
       {{"pp", 2}}},
      {"pp-norm-one-stage",
       "the clip's gradient norm is taken over each pipeline stage's own parameters, not summed over the stages",
       "optimizer",
       "",
       kMesh,
       {{"pp", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"clip-norm-every-replica",
       "every rank of a pool adds its pool's ||g||^2 to the clip's global norm (a pool counted n_ci or n_per_block "
       "times)",
       "optimizer",
       "",
       kThreePool,
       {{"n_ci", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"clip-cotangent-every-replica",
       "the clip's global norm is exact, but its backward takes the whole cotangent of c from every replica: "
       "REPLAY counts the clip's term once per pool rank",
       "replay",
       "",
       kThreePool,
       {{"n_ci", 2}},
       {},
       PrecisionNeed::kNone,
       /*needs_clipping=*/true},
      {"avg-weight-gradient",
       "REPLAY's dQ/dw is averaged over the ranks instead of summed (the pools' rows partition the batch)",
       "replay",
       "1/world",
       kThreePool,
       {{"world", 2}}},
      {"replay-opt-cotangent-keeps-loss-scale",
       "REPLAY multiplies its cotangents by the fp16 loss scale and divides the parameters' back, not the "
       "optimizer state's",
       "replay",
       "x loss_scale",
       kMesh,  // the three-pool workload has no whole-step rows: its scores turn NaN (fp16)
       {},
       {},
       PrecisionNeed::kLossScale},
      {"replay-start-keeps-loss-scale",
       "REPLAY starts from the query gradient of the loss-scaled query (S*dQ/dtheta_N), which the run reports "
       "unscaled: every score is S times too large",
       "replay",
       "x loss_scale",
       std::nullopt,
       {},
       {},
       PrecisionNeed::kLossScale},
      {"optimizer-input-scaled",
       "the embeddings' gradient is all-reduced once more over dp between clipping and the optimizer",
       "optimizer",
       "x dp",
       kMesh,
       {{"dp", 2}}},
      {"query-grad-scaled",
       "the query gradient of the embeddings is all-reduced once more over dp",
       "query_grad",
       "x dp",
       kMesh,
       {{"dp", 2}}},
      {"replay-restore-fresh-optimizer",
       "REPLAY restores a checkpoint's parameters with a fresh optimizer state (a model-only load)",
       "replay",
       "",
       std::nullopt,
       {},
       {},
       PrecisionNeed::kNone,
       false,
       /*needs_later_checkpoint=*/true},
  };
  // The bridge's own bugs (planted_bridge.h), on a bridge layout's language-model mesh; they show
  // on the encoder's gradient rows.
  static const std::vector<Mutation> with_bridge = [] {
    const std::map<std::string, std::vector<std::pair<std::string, int64_t>>> needs{
        {"bridge-no-intra-cp-sum", {{"bridge", 1}, {"cp", 2}}},
        {"bridge-fan-out-pooled-over-cp", {{"fan_out", 2}, {"cp", 2}}},
        {"bridge-fan-in-wrong-offset", {{"fan_in", 2}}},
        {"bridge-fan-out-cp0-slice", {{"fan_out", 2}, {"cp", 2}}},
    };
    std::vector<Mutation> out = catalog;
    for (const BridgeMutation& b : bridge_mutations()) {
      out.push_back({b.name, b.description, "grad", b.factor, dist::TopologyFamily::kMesh, needs.at(b.name)});
      out.back().ends_the_run = b.ends_the_run;
    }
    return out;
  }();
  return with_bridge;
}

namespace {

int64_t size_of(const std::string& name, const dist::TopologySpec& topology) {
  if (name == "bridge") return topology.is_bridge() ? 1 : 0;
  if (name == "enc_fsdp") return topology.is_bridge() ? topology.bridge().encoder.fsdp : 0;
  if (name == "fan_in" || name == "fan_out") {
    if (!topology.is_bridge()) return 1;
    const int64_t enc = topology.bridge().encoder.dp, lm = topology.dp();
    return name == "fan_in" ? std::max<int64_t>(1, enc / lm) : std::max<int64_t>(1, lm / enc);
  }
  if (name == "replicas") return topology.dp() / topology.fsdp();
  if (name == "holders") return topology.dp() / topology.fsdp() * topology.cp();
  if (name == "world") return topology.world_size();
  if (name == "sp") return topology.sp() ? 1 : 0;
  if (name == "ring") return topology.ring() ? 1 : 0;
  for (const auto& [key, value] : topology.named_sizes()) {
    if (key == name) return value;
  }
  throw std::logic_error("mutation catalog: unknown size '" + name + "'");
}

bool checks_level(const std::vector<Level>& levels, const std::string& level) {
  for (Level l : levels) {
    if (level_name(l) == level) return true;
  }
  return false;
}

std::string level_list(const std::vector<Level>& levels) {
  std::vector<std::string> names;
  for (Level l : levels) names.push_back(level_name(l));
  return join(names, ",");
}

std::string describe(const std::string& name) {
  if (name == "bridge") return "a bridge layout (enc=...;lm=...): bridge";
  if (name == "fan_in") return "a fan-in bridge (enc dp / lm dp)";
  if (name == "fan_out") return "a fan-out bridge (lm dp / enc dp)";
  if (name == "enc_fsdp") return "a bridge whose encoder shards its parameters (enc=...,fsdpF): enc_fsdp";
  if (name == "ring") return "ring attention (cp_impl=ring)";
  return name == "replicas" ? "replicas (dp/fsdp)" : name == "holders" ? "holders (dp/fsdp*cp)" : name;
}

std::string level_unchecked(const Mutation& m, const std::vector<Level>& levels) {
  return str_cat("it shows first at level ", m.expected_level, ", which --checks ", level_list(levels), " leaves out");
}

std::string unmet_precision(PrecisionNeed need, const PrecisionPolicy& p) {
  switch (need) {
    case PrecisionNeed::kNone:
      return "";
    case PrecisionNeed::kLowPrecision:
      return p.compute != p.master ? "" : str_cat("needs a compute dtype below the master dtype (", p.str(), " here)");
    case PrecisionNeed::kLossScale:
      return p.loss_scale >= 2.0 ? "" : str_cat("needs a loss scale >= 2 (--dtype fp16; ", p.str(), " here)");
    case PrecisionNeed::kReduceInMaster:
      return p.reduce == p.master && p.master != p.compute
                 ? ""
                 : str_cat("needs a policy that reduces in the master dtype, above the compute dtype (", p.str(),
                           " here)");
    case PrecisionNeed::kFp16:
      return p.compute == c10::kHalf ? "" : str_cat("needs fp16 compute (", p.str(), " here)");
    case PrecisionNeed::kResolvesTinyErrors:
      return unit_roundoff(p.compute) <= unit_roundoff(c10::kFloat)
                 ? ""
                 : str_cat(
                       "needs fp32 or finer (its error at fp64, a few parts in ten thousand to a thousand, is "
                       "within ",
                       dtype_name(p.compute), "'s own rounding)");
  }
  return "";
}

}  // namespace

RunTraits run_traits(const CheckSettings& s) {
  RunTraits traits;
  traits.clipping = s.run_config ? s.run_config->optimizer.clip_norm.has_value() : true;
  const auto steps = checkpoint_steps(parse_checkpoint_schedule(s.checkpoints), s.steps);
  traits.later_checkpoint = steps.size() > 1;
  traits.label_smoothing = s.label_smoothing > 0.0;
  // Only a pipeline holds two copies of a tied embedding (and only then is the model read here).
  traits.tied_head = s.topology.pp() > 1 && s.resolved_workload() == "lm" &&
                     s.topology.family() == dist::TopologyFamily::kMesh && lm_unclipped_config(s).model.tied_head;
  return traits;
}

std::string precision_need_text(PrecisionNeed need) {
  switch (need) {
    case PrecisionNeed::kNone:
      return "";
    case PrecisionNeed::kLowPrecision:
      return "compute dtype below master (--dtype bf16 | fp16)";
    case PrecisionNeed::kLossScale:
      return "loss_scale >= 2 (--dtype fp16)";
    case PrecisionNeed::kReduceInMaster:
      return "reduce dtype = master, above compute (--dtype bf16 | fp16)";
    case PrecisionNeed::kFp16:
      return "fp16 compute (--dtype fp16)";
    case PrecisionNeed::kResolvesTinyErrors:
      return "compute dtype fp32 or finer";
  }
  return "";
}

std::vector<std::pair<std::string, int64_t>> factor_sizes(const dist::TopologySpec& topology,
                                                          const PrecisionPolicy& precision) {
  auto sizes = topology.named_sizes();
  if (precision.loss_scale >= 2.0) sizes.emplace_back("loss_scale", static_cast<int64_t>(precision.loss_scale));
  return sizes;
}

std::string unmet_requirement(const Mutation& m, const dist::TopologySpec& topology, const PrecisionPolicy& precision,
                              RunTraits run) {
  if (m.needs_clipping && !run.clipping) return "needs gradient clipping (the checked run has no optimizer.clip_norm)";
  if (m.needs_tied_head && !run.tied_head) {
    return "needs a tied head (a model folder whose head is its token embedding, such as fixtures/models/gpt2-tiny)";
  }
  if (m.needs_label_smoothing && !run.label_smoothing) {
    return "needs label smoothing (--label-smoothing or training.label_smoothing > 0)";
  }
  if (m.needs_later_checkpoint && !run.later_checkpoint) {
    return "needs a checkpoint after step 0 for REPLAY to restore (2 steps or more)";
  }
  if (std::string unmet = unmet_precision(m.precision_need, precision); !unmet.empty()) return unmet;
  for (const auto& [name, least] : m.at_least) {
    const int64_t v = size_of(name, topology);
    if (v < least) return str_cat("needs ", describe(name), " >= ", least, " (", name, "=", v, " here)");
  }
  for (const auto& [name, most] : m.at_most) {
    const int64_t v = size_of(name, topology);
    if (name == "ring" && v > most)
      return "needs cp_impl=gather (its bug is in the K/V all-gather, which ring attention does not run)";
    if (v > most) {
      return str_cat("needs ", describe(name), " <= ", most, " (", name, "=", v, " here): its factor is stated for it");
    }
  }
  return "";
}

BitePlan plan_bite(const dist::TopologySpec& topology, const std::vector<Level>& levels,
                   const PrecisionPolicy& precision, RunTraits run) {
  BitePlan plan;
  for (const auto& m : mutation_catalog()) {
    if (m.family && m.family != topology.family()) continue;
    if (const std::string unmet = unmet_requirement(m, topology, precision, run); !unmet.empty()) {
      plan.skipped.push_back({m.name, unmet});
    } else if (m.ends_the_run) {
      plan.skipped.push_back({m.name,
                              "it ends the run with a named rank failure, which --bite cannot go on from: "
                              "check it with --mutate (exit 1)"});
    } else if (!checks_level(levels, m.expected_level)) {
      plan.skipped.push_back({m.name, level_unchecked(m, levels)});
    } else {
      plan.run.push_back(m);
    }
  }
  return plan;
}

const Mutation& find_mutation(const std::string& name, const dist::TopologySpec& topology,
                              const std::vector<Level>& levels, const PrecisionPolicy& precision, RunTraits run) {
  std::vector<std::string> names;
  for (const auto& m : mutation_catalog()) names.push_back(m.name);
  for (const auto& m : mutation_catalog()) {
    if (m.name != name) continue;
    if (m.family && m.family != topology.family()) {
      throw InputError(str_cat("--mutate ", name, ": does not apply to ", topology.str(), "; it needs a ",
                               m.family == dist::TopologyFamily::kMesh ? "mesh" : "three-pool", " layout"));
    }
    if (const std::string unmet = unmet_requirement(m, topology, precision, run); !unmet.empty()) {
      throw InputError(str_cat("--mutate ", name, ": does not apply to ", topology.str(), "; it ", unmet));
    }
    if (!checks_level(levels, m.expected_level)) {
      throw InputError(
          str_cat("--mutate ", name, ": ", level_unchecked(m, levels), "; add ", m.expected_level, " to --checks"));
    }
    return m;
  }
  throw InputError(str_cat("--mutate: unknown mutation '", name, "'; expected one of ", join(names, ", ")));
}

BiteOutcome judge_mutation(const Mutation& mutation, const dist::TopologySpec& topology,
                           const std::vector<CheckRow>& rows, const PrecisionPolicy& precision) {
  BiteOutcome v;
  v.mutation = mutation.name;
  v.description = mutation.description;
  v.expected_level = mutation.expected_level;
  v.expected_factor = mutation.expected_factor;
  int first = level_rank("");
  for (const auto& row : rows) {
    if (!row.passed) first = std::min(first, level_rank(row.level));
  }
  const auto& levels = all_levels();
  v.observed_level = first < static_cast<int>(levels.size()) ? level_name(levels[first]) : "";

  // The numeric value the expected factor has on this topology ("1/n_ci" -> 0.25 at n_ci=4).
  std::optional<double> expected_value;
  for (const auto& f : candidate_factors(factor_sizes(topology, precision))) {
    if (f.name == mutation.expected_factor) expected_value = f.value;
  }
  // A row shows the factor when its scale has the expected value (the diagnosis matched it
  // exactly, or as ≈ where uneven shards blur it) and the expected name is among its names.
  auto shows_factor = [&](const CheckRow& row) {
    if (!expected_value || row.diagnosis.factors.empty()) return false;
    const auto& names = row.diagnosis.factors;
    return std::abs(row.stats.scale / *expected_value - 1.0) <= row.diagnosis.scale_tolerance &&
           std::find(names.begin(), names.end(), mutation.expected_factor) != names.end();
  };
  // The row to show: the first failing row at the expected level showing the factor (an exact
  // match before an approximate one), else the first failing row at that level.
  const CheckRow* shown = nullptr;
  int shown_quality = -1;  // 2 exact match, 1 approximate match, 0 any failure
  for (const auto& row : rows) {
    if (row.passed || row.level != mutation.expected_level) continue;
    const int quality = shows_factor(row) ? (row.diagnosis.exact ? 2 : 1) : 0;
    if (quality > shown_quality) {
      shown = &row;
      shown_quality = quality;
    }
  }
  if (shown != nullptr) {
    v.observed_diagnosis = row_label(*shown) + ": " + shown->diagnosis.text;
    v.observed_factor = join(shown->diagnosis.factors, " = ");
    v.factor_distinct = mutation.expected_factor.empty() || shown->diagnosis.factors.size() <= 1;
  }
  const bool factor_seen = mutation.expected_factor.empty() || shown_quality > 0;
  v.caught = v.observed_level == mutation.expected_level && factor_seen;
  return v;
}

}  // namespace magic::checks
