#include "lib/distributed/pools/three_pool_spd.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/derivative_scale.h"
#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/pools/gate_exchange.h"
#include "lib/distributed/pools/pool_rows.h"
#include "lib/model/kernel_fallback.h"
#include "lib/optim/clip.h"

namespace magic::dist {
namespace {

constexpr const char* kSync = "sync";

TensorTree without_sync(const TensorTree& tree) {
  return tree.filter([](const std::string& name, const at::Tensor&) { return name != kSync; });
}

// One bucket: a single collective (per derivative order) for the whole tree, not one per tensor.
TensorTree entered(const TensorTree& params, const Group& group) {
  const TensorTree real = without_sync(params);
  return real.unflatten(copy_to_group(real.flatten(), group));
}

}  // namespace

ThreePoolSpd::ThreePoolSpd(ThreePoolSpdSetup setup, ThreePoolLayout layout, ThreePoolGroups groups, int rank)
    : setup_(std::move(setup)), layout_(std::move(layout)), groups_(std::move(groups)), rank_(rank) {
  for (const auto& w : setup_.data.target) target_compute_.push_back(in_compute(w));
}

TensorTree ThreePoolSpd::entered_params(const TensorTree& params, const Group& pool) const {
  return cast_floating(entered(params, pool), setup_.precision->policy().compute);
}

bool ThreePoolSpd::pool_leader() const {
  return layout_.index_in_pool(rank_) == 0;
}

TrainState ThreePoolSpd::initial_state(const TensorTree& full_params, const TensorTree& full_sources) const {
  TensorTree own;
  if (role() == PoolRole::kCi) {
    own = full_params.filter([](const std::string& n, const at::Tensor&) { return n.rfind("ci.", 0) == 0; });
  } else if (role() == PoolRole::kBlock) {
    for (int64_t s : layout_.sites_of_block(layout_.block_of(rank_))) {
      own.insert(str_cat("V.", s), full_params.at(str_cat("V.", s)));
      own.insert(str_cat("U.", s), full_params.at(str_cat("U.", s)));
    }
  }
  TrainState state;
  state.opt = setup_.optimizer->init(own);
  state.params = own.clone();
  state.params.insert(kSync, at::zeros({}, full_sources.begin()->tensor.options()));
  if (role() == PoolRole::kPpgd) state.persistent = full_sources.clone();
  return state;
}

ThreePoolSpd::Shard ThreePoolSpd::shard_of(int64_t t, const at::Tensor& w) const {
  Shard shard;
  const std::vector<int64_t> rows = setup_.stream->rows(t);
  shard.t = t;
  shard.batch = static_cast<int64_t>(rows.size());
  shard.real_rows = real_rows(rows, setup_.data.inputs.size(0));
  shard.range = rows_of(layout_, rank_, shard.batch);
  shard.rows = rows_in(rows, shard.range);
  shard.site_inputs = spd_site_inputs(target_compute_, in_compute(inputs_of(setup_.data.inputs, shard.rows)));
  shard.weights = weights_of(w, shard.rows);
  return shard;
}

std::pair<at::Tensor, at::Tensor> ThreePoolSpd::local_loss(const TrainState& s, int64_t t, const at::Tensor& w,
                                                           const SpdTermWeights& terms) const {
  const Shard shard = shard_of(t, w);
  if (role() == PoolRole::kCi) return ci_loss(s, shard, terms);
  const SpdConfig& c = setup_.config;
  const at::Tensor gates =
      setup_.conventions->consumed_gates(receive_gates(layout_, *groups_.world, rank_, s.params.at(kSync), shard.batch,
                                                       c.n_sites, c.components, portal_id(t, kTrainGates)),
                                         layout_);
  if (role() == PoolRole::kBlock) return block_loss(s, shard, gates, terms);
  return {ppgd_loss(s, shard, gates, terms), at::zeros({}, gates.options())};
}

// Gates of this shard; the importance term of the global sum, contributed once through the
// differentiable all_reduce_sum (exact at every derivative order).
std::pair<at::Tensor, at::Tensor> ThreePoolSpd::ci_loss(const TrainState& s, const Shard& shard,
                                                        const SpdTermWeights& terms) const {
  const SpdConfig& c = setup_.config;
  const ThreePoolConventions& conventions = *setup_.conventions;
  const TensorTree ci = entered_params(s.params, *groups_.ci);
  std::vector<at::Tensor> gates;
  at::Tensor importance = at::zeros({shard.range.size()}, s.params.at(kSync).options());
  for (int64_t site = 0; site < c.n_sites; ++site) {
    gates.push_back(spd_gates(ci, site, shard.site_inputs[site]));
    importance = importance + in_master(gates.back().sum(1));
  }
  const at::Tensor local = (shard.weights * importance).sum() / shard.real_rows;
  const at::Tensor total = conventions.importance_sum(local, *groups_.ci);
  const double once = conventions.importance_coefficient(pool_leader());
  const at::Tensor loss =
      once * terms.importance * c.importance_coeff * spd_importance_penalty(total, c.importance_beta);
  const at::Tensor tokens = send_gates(layout_, *groups_.world, rank_, consumers_of_gates(layout_, true),
                                       in_master(at::stack(gates, 1)), shard.batch, portal_id(shard.t, kTrainGates));
  return {loss + tokens, tokens};
}

// The reconstruction of the block's sites and, on its leader only, the faithfulness term
// (contribute once); then the components portal: every block rank sends (the leader its V/U,
// the others zeros), so all ranks of a block build the same graph.
std::pair<at::Tensor, at::Tensor> ThreePoolSpd::block_loss(const TrainState& s, const Shard& shard,
                                                           const at::Tensor& gates, const SpdTermWeights& terms) const {
  const SpdConfig& c = setup_.config;
  const at::Tensor& sync = s.params.at(kSync);
  const TensorTree vu = entered_params(s.params, *groups_.block);
  at::Tensor rec = at::zeros({shard.range.size()}, sync.options()), faith = at::zeros({}, sync.options());
  for (int64_t site : layout_.sites_of_block(layout_.block_of(rank_))) {
    const at::Tensor& x = shard.site_inputs[site];
    const at::Tensor g = in_compute(gates.select(1, site));
    const at::Tensor u = in_compute(
        spd_stochastic_sources(setup_.source_seed, shard.t, shard.rows, site, c.components, sync.scalar_type()));
    const at::Tensor target = kernels::matmul(x, target_compute_[site]);
    rec = rec + in_master(spd_site_error(spd_masked_output(vu, site, x, g + (1 - g) * u), target));
    faith = faith + in_master(spd_faithfulness(vu, site, target_compute_[site]));
  }
  const double once = setup_.conventions->faithfulness_coefficient(pool_leader());
  const at::Tensor loss =
      terms.reconstruction * c.reconstruction_coeff * (shard.weights * rec).sum() / shard.real_rows +
      once * terms.faithfulness * c.faithfulness_coeff * faith;
  const at::Tensor flat = in_master(vu.flatten()) * (pool_leader() ? 1.0 : 0.0);
  at::Tensor tokens = at::zeros({}, sync.options());
  for (int p : layout_.ppgd_ranks()) {
    tokens = tokens + portal_send(flat, *groups_.world, p, portal_id(shard.t, kTrainComponents));
  }
  return {loss + tokens, tokens};
}

// The V/U replica from the blocks, then the PPGD term with the persistent sources.
at::Tensor ThreePoolSpd::ppgd_loss(const TrainState& s, const Shard& shard, const at::Tensor& gates,
                                   const SpdTermWeights& terms) const {
  const SpdConfig& c = setup_.config;
  const int64_t C = c.components;
  // Every block rank's share, its receive posted before any is waited for.
  std::vector<PortalSource> sources;
  for (int64_t k = 0; k < layout_.n_blocks(); ++k) {
    const int64_t numel = 2 * c.width * C * static_cast<int64_t>(layout_.sites_of_block(k).size());
    for (int r : layout_.block_ranks(k)) sources.push_back({r, {numel}});
  }
  const std::vector<at::Tensor> parts =
      portal_recv_all(s.params.at(kSync), sources, *groups_.world, portal_id(shard.t, kTrainComponents));
  TensorTree vu;
  size_t next = 0;
  for (int64_t k = 0; k < layout_.n_blocks(); ++k) {
    const auto sites = layout_.sites_of_block(k);
    at::Tensor flat;
    for (size_t i = 0; i < layout_.block_ranks(k).size(); ++i) {
      const at::Tensor& part = parts[next++];
      flat = flat.defined() ? flat + part : part;
    }
    int64_t offset = 0;
    for (int64_t site : sites) {
      vu.insert(str_cat("V.", site), in_compute(flat.narrow(0, offset, c.width * C).view({c.width, C})));
      offset += c.width * C;
      vu.insert(str_cat("U.", site), in_compute(flat.narrow(0, offset, C * c.width).view({C, c.width})));
      offset += C * c.width;
    }
  }
  vu = setup_.conventions->ppgd_components(vu, *groups_.ppgd);
  at::Tensor ppgd = at::zeros({shard.range.size()}, gates.options());
  for (int64_t site = 0; site < c.n_sites; ++site) {
    const at::Tensor& x = shard.site_inputs[site];
    const at::Tensor g = in_compute(gates.select(1, site));
    const at::Tensor a = in_compute(s.persistent.at(str_cat("a.", site)));
    ppgd = ppgd + in_master(spd_site_error(spd_masked_output(vu, site, x, g + (1 - g) * a),
                                           kernels::matmul(x, target_compute_[site])));
  }
  return terms.ppgd * c.ppgd_coeff * (shard.weights * ppgd).sum() / shard.real_rows;
}

TensorTree ThreePoolSpd::differentiate(const TrainState& s, int64_t t, const at::Tensor& w, const SpdTermWeights& terms,
                                       bool create_graph, at::Tensor* sources_grad) const {
  wait_portal_sends(*groups_.world);  // those of earlier passes (REPLAY's vector-Jacobian products included)
  const auto [unscaled_loss, tokens] = local_loss(s, t, w, terms);
  const at::Tensor loss = setup_.precision->scale_loss(unscaled_loss);
  std::vector<at::Tensor> inputs = s.params.tensors();
  const bool with_sources = sources_grad != nullptr && !s.persistent.empty();
  if (with_sources) {
    for (const auto& e : s.persistent) inputs.push_back(e.tensor);
  }
  auto grads = torch::autograd::grad({loss}, inputs, {}, create_graph, create_graph, /*allow_unused=*/true);
  TensorTree out = with_values(s.params, grads);
  // Whatever differentiates this gradient again (REPLAY, HVPs) reaches the portals this rank
  // sent, as their receivers reach the portals they received: the sends' tokens ride on sync.
  if (create_graph) out.set(kSync, out.at(kSync) + 0.0 * tokens);
  if (with_sources) {
    *sources_grad =
        with_values(s.persistent, grads, s.params.size()).detach().flatten() / setup_.precision->policy().loss_scale;
  }
  return setup_.precision->unscale(setup_.conventions->reduced_gradient(role(), out, layout_));
}

TensorTree ThreePoolSpd::gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const {
  return differentiate(state, t, w, {}, create_graph, nullptr);
}

TensorTree ThreePoolSpd::term_gradient(const TrainState& state, int64_t t, const at::Tensor& w, SpdTerm term) const {
  TrainState leaves{state.params.requires_grad(), state.opt, state.persistent.detach()};
  return differentiate(leaves, t, w.detach(), SpdTermWeights::only(term), false, nullptr).detach();
}

StepOutput ThreePoolSpd::step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const {
  TrainState in = s;
  if (!traced) {
    in.params = s.params.requires_grad();
    in.persistent = s.persistent.requires_grad();
  }
  at::Tensor sources_grad;
  TensorTree grads = differentiate(in, t, traced ? w : w.detach(), {}, traced, &sources_grad);

  at::AutoGradMode grad_mode(traced);
  at::Tensor coefficient;
  if (setup_.clip_norm) {
    coefficient = clip_coefficient_of(in, grads);
    grads = grads.map([&](const at::Tensor& g) { return g * coefficient; });  // sync's too: c stays in every graph
  }
  const TensorTree real = without_sync(in.params);
  OptimizerUpdate update = setup_.optimizer->update(traced ? real : real.detach(), without_sync(grads), s.opt);
  TrainState next{setup_.precision->store(update.params), update.state, in.persistent};
  // sync stays exactly 0 but keeps its gradient (and so every collective) in the graph.
  next.params.insert(kSync, in.params.at(kSync) + 0.0 * grads.at(kSync));
  if (role() == PoolRole::kPpgd) {
    // Sign-gradient ascent on the PPGD pool's summed gradient; sign() has no derivative.
    groups_.ppgd->all_reduce_sum_(sources_grad);
    TensorTree sources;
    int64_t offset = 0;
    for (const auto& e : in.persistent) {
      const at::Tensor g = sources_grad.narrow(0, offset, e.tensor.numel()).view(e.tensor.sizes());
      sources.insert(e.name, spd_sources_ascent(e.tensor, g, setup_.config.ppgd_step));
      offset += e.tensor.numel();
    }
    next.persistent = sources;
  }
  StepOutput out{next, grads, coefficient};
  if (!traced) {
    out.next = detach_state(out.next);
    out.grads = out.grads.detach();
    if (coefficient.defined()) out.clip_coefficient = coefficient.detach();
  }
  return out;
}

// ||g||² = Σ_pools ||g_pool||², summed over every rank. A pool's n ranks hold the same g_pool and,
// in REPLAY, the same cotangent of it (the replicated convention, collectives.h), so each rank
// adds ||g_pool||²/n and passes 1/n of c's cotangent into the sum's backward: the value counts
// each pool once, so does the derivative, and every replica receives the whole of it.
at::Tensor ThreePoolSpd::clip_coefficient_of(const TrainState& s, const TensorTree& grads) const {
  const auto& pool = role() == PoolRole::kCi ? groups_.ci : role() == PoolRole::kBlock ? groups_.block : groups_.ppgd;
  const double share = setup_.conventions->clip_squares_share(pool->size());
  const double cotangent_share = setup_.conventions->clip_cotangent_share(pool->size());
  // sync's zero term keeps the sum in the graph of a rank without parameters (the PPGD pool), so
  // that every rank's REPLAY backward reaches the collective.
  at::Tensor squares = 0.0 * s.params.at(kSync);
  for (const auto& g : without_sync(grads)) squares = squares + (g.tensor * g.tensor).sum();
  const at::Tensor total = all_reduce_sum(with_derivative_scale(share * squares, 1.0 / share), *groups_.norm);
  return clip_coefficient(*setup_.clip_norm, with_derivative_scale(total, cotangent_share).sqrt());
}

void ThreePoolSpd::finish() const {
  wait_portal_sends(*groups_.world);
}

at::Tensor ThreePoolSpd::assemble_weight_gradient(const at::Tensor& local) const {
  wait_portal_sends(*groups_.world);
  return groups_.world->sum(local) * setup_.conventions->weight_gradient_scale(groups_.world->size());
}

at::Tensor ThreePoolSpd::loss(const TensorTree& params, std::optional<int64_t> index) const {
  if (index) throw std::invalid_argument("per-query scores are not implemented for the decomposition workload");
  wait_portal_sends(*groups_.world);
  const SpdConfig& c = setup_.config;
  const at::Tensor& queries = setup_.data.queries;
  const int64_t Q = queries.size(0), S = c.n_sites, C = c.components;
  const at::Tensor& sync = params.at(kSync);
  const Group& world = *groups_.world;
  const PortalId id = portal_id(num_steps() + 1, kQueryGates);
  const RowRange mine = rows_of(layout_, rank_, Q);
  at::Tensor local = at::zeros({}, sync.options());
  if (role() == PoolRole::kCi) {
    const auto xs = spd_site_inputs(target_compute_, in_compute(queries.narrow(0, mine.begin, mine.size())));
    const TensorTree ci = entered_params(params, *groups_.ci);
    std::vector<at::Tensor> gates;
    for (int64_t site = 0; site < S; ++site) gates.push_back(spd_gates(ci, site, xs[site]));
    local = local + send_gates(layout_, world, rank_, consumers_of_gates(layout_, false),
                               in_master(at::stack(gates, 1)), Q, id);
  } else if (role() == PoolRole::kBlock) {
    const at::Tensor gates = receive_gates(layout_, world, rank_, sync, Q, S, C, id);
    const TensorTree vu = entered_params(params, *groups_.block);
    const auto xs = spd_site_inputs(target_compute_, in_compute(queries.narrow(0, mine.begin, mine.size())));
    for (int64_t site : layout_.sites_of_block(layout_.block_of(rank_))) {
      const at::Tensor target = kernels::matmul(xs[site], target_compute_[site]);
      const at::Tensor error =
          spd_site_error(spd_masked_output(vu, site, xs[site], in_compute(gates.select(1, site))), target);
      local = local + in_master(error).sum() / static_cast<double>(Q);
    }
  } else {
    local = local + 0.0 * sync;
  }
  // The global Q on every rank, each rank's own part in backward (Q is a plain sum over ranks).
  return with_global_value(local, world);
}

}  // namespace magic::dist
