#include "lib/dist/three_pool_spd.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/strings.h"
#include "lib/dist/collectives.h"
#include "lib/dist/portal.h"

namespace magic::dist {
namespace {

constexpr const char* kSync = "sync";

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t begin, int64_t length) {
  return std::vector<int64_t>(v.begin() + begin, v.begin() + begin + length);
}

// Inputs of `rows`; the padding row (index = examples) is zero and carries weight 0.
at::Tensor inputs_of(const at::Tensor& inputs, const std::vector<int64_t>& rows) {
  return at::cat({inputs, at::zeros({1, inputs.size(1)}, inputs.options())})
      .index_select(0, at::tensor(rows, at::kLong));
}

at::Tensor weights_of(const at::Tensor& w, const std::vector<int64_t>& rows) {
  return at::cat({w, at::zeros({1}, w.options())}).index_select(0, at::tensor(rows, at::kLong));
}

double real_rows(const std::vector<int64_t>& rows, int64_t examples) {
  double n = 0;
  for (int64_t r : rows) n += r < examples;
  return n;
}

TensorTree without_sync(const TensorTree& tree) {
  return tree.filter([](const std::string& name, const at::Tensor&) { return name != kSync; });
}

TensorTree entered(const TensorTree& params, const Group& group) {
  return without_sync(params).map([&](const at::Tensor& p) { return copy_to_group(p, group); });
}

// Portals: one block of 8 logical tags (forward and derivative orders) per transfer kind and
// phase (training step t, or the query after the last step).
enum PortalKind : int64_t { kTrainGates = 0, kTrainComponents = 1, kQueryGates = 2 };
PortalId portal_id(int64_t phase, PortalKind kind) {
  static const char* const names[] = {"gates", "components", "query gates"};
  return {names[kind], (phase * 4 + kind) * 8};
}

struct RowRange {
  int64_t begin, end;
};

}  // namespace

ThreePoolGroups make_three_pool_groups(const Runtime& runtime, const ThreePoolLayout& layout) {
  ThreePoolGroups g;
  g.world = runtime.world();
  g.ci = runtime.new_group("ci", layout.ci_ranks());
  for (int64_t k = 0; k < layout.n_blocks(); ++k) {
    auto block = runtime.new_group(str_cat("block", k), layout.block_ranks(k));
    if (block) g.block = block;
  }
  g.ppgd = runtime.new_group("ppgd", layout.ppgd_ranks());
  return g;
}

ThreePoolSpd::ThreePoolSpd(ThreePoolSpdSetup setup, ThreePoolLayout layout, ThreePoolGroups groups, int rank)
    : setup_(std::move(setup)), layout_(std::move(layout)), groups_(std::move(groups)), rank_(rank) {}

bool ThreePoolSpd::pool_leader() const {
  return layout_.index_in_pool(rank_) == 0;
}

namespace {

// The rows of a `batch`-row global batch that `rank`'s pool shard holds.
RowRange rows_of(const ThreePoolLayout& layout, int rank, int64_t batch) {
  int64_t pool = 1;
  switch (layout.role(rank)) {
    case PoolRole::kCi:
      pool = layout.n_ci();
      break;
    case PoolRole::kBlock:
      pool = layout.n_per_block();
      break;
    case PoolRole::kPpgd:
      pool = layout.n_ppgd();
      break;
  }
  const int64_t n = batch / pool, i = layout.index_in_pool(rank);
  return {i * n, (i + 1) * n};
}

RowRange overlap(RowRange a, RowRange b) {
  return {std::max(a.begin, b.begin), std::min(a.end, b.end)};
}

// The gates portal. CI ranks send each consumer the gates of the rows they share and return the
// tokens; consumers receive their rows' gates from the CI ranks holding them, in row order.
at::Tensor send_gates(const ThreePoolLayout& layout, const Group& world, int rank, const std::vector<int>& consumers,
                      const at::Tensor& gates, int64_t batch, const PortalId& id) {
  const RowRange mine = rows_of(layout, rank, batch);
  at::Tensor tokens = at::zeros({}, gates.options());
  for (int consumer : consumers) {
    const RowRange shared = overlap(mine, rows_of(layout, consumer, batch));
    if (shared.begin >= shared.end) continue;
    tokens = tokens +
             portal_send(gates.narrow(0, shared.begin - mine.begin, shared.end - shared.begin), world, consumer, id);
  }
  return tokens;
}

at::Tensor receive_gates(const ThreePoolLayout& layout, const Group& world, int rank, const at::Tensor& anchor,
                         int64_t batch, int64_t sites, int64_t components, const PortalId& id) {
  const RowRange mine = rows_of(layout, rank, batch);
  std::vector<at::Tensor> pieces;
  for (int source : layout.ci_ranks()) {
    const RowRange shared = overlap(mine, rows_of(layout, source, batch));
    if (shared.begin >= shared.end) continue;
    pieces.push_back(portal_recv(anchor, {shared.end - shared.begin, sites, components}, world, source, id));
  }
  return at::cat(pieces);
}

std::vector<int> consumers_of_gates(const ThreePoolLayout& layout, bool with_ppgd) {
  std::vector<int> ranks;
  for (int64_t k = 0; k < layout.n_blocks(); ++k) {
    for (int r : layout.block_ranks(k)) ranks.push_back(r);
  }
  if (with_ppgd) {
    for (int r : layout.ppgd_ranks()) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace

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

std::pair<at::Tensor, at::Tensor> ThreePoolSpd::local_loss(const TrainState& s, int64_t t, const at::Tensor& w,
                                                           const SpdTermWeights& terms) const {
  const SpdConfig& c = setup_.config;
  const SpdData& data = setup_.data;
  const std::vector<int64_t> rows = setup_.stream->rows(t);
  const auto B = static_cast<int64_t>(rows.size());
  const double R = real_rows(rows, data.inputs.size(0));
  const int64_t S = c.n_sites, C = c.components;
  const at::Tensor& sync = s.params.at(kSync);
  const ThreePoolConventions& conventions = *setup_.conventions;
  const Group& world = *groups_.world;
  const RowRange mine = rows_of(layout_, rank_, B);
  const auto my_rows = slice(rows, mine.begin, mine.end - mine.begin);
  const auto xs = spd_site_inputs(data.target, inputs_of(data.inputs, my_rows));
  const at::Tensor my_weights = weights_of(w, my_rows);
  at::Tensor loss = at::zeros({}, sync.options()), tokens = at::zeros({}, sync.options());

  if (role() == PoolRole::kCi) {
    // Gates of this shard; the importance term of the global sum, contributed once through the
    // differentiable all_reduce_sum (exact at every derivative order).
    const TensorTree ci = entered(s.params, *groups_.ci);
    std::vector<at::Tensor> gates;
    at::Tensor importance = at::zeros({mine.end - mine.begin}, sync.options());
    for (int64_t site = 0; site < S; ++site) {
      gates.push_back(spd_gates(ci, site, xs[site]));
      importance = importance + gates.back().sum(1);
    }
    const at::Tensor local = (my_weights * importance).sum() / R;
    const at::Tensor total = conventions.importance_sum(local, *groups_.ci);
    const double once = conventions.importance_coefficient(pool_leader());
    loss = loss + once * terms.importance * c.importance_coeff * spd_importance_penalty(total, c.importance_beta);
    tokens = send_gates(layout_, world, rank_, consumers_of_gates(layout_, true), at::stack(gates, 1), B,
                        portal_id(t, kTrainGates));
    return {loss + tokens, tokens};
  }

  const at::Tensor gates = conventions.consumed_gates(
      receive_gates(layout_, world, rank_, sync, B, S, C, portal_id(t, kTrainGates)), layout_);

  if (role() == PoolRole::kBlock) {
    const int64_t block = layout_.block_of(rank_);
    const TensorTree vu = entered(s.params, *groups_.block);
    at::Tensor rec = at::zeros({mine.end - mine.begin}, sync.options()), faith = at::zeros({}, sync.options());
    for (int64_t site : layout_.sites_of_block(block)) {
      const at::Tensor g = gates.select(1, site);
      const at::Tensor u = spd_stochastic_sources(setup_.source_seed, t, my_rows, site, C, sync.scalar_type());
      const at::Tensor target = at::matmul(xs[site], data.target[site]);
      rec = rec + spd_site_error(spd_masked_output(vu, site, xs[site], g + (1 - g) * u), target);
      faith = faith + spd_faithfulness(vu, site, data.target[site]);
    }
    loss = loss + terms.reconstruction * c.reconstruction_coeff * (my_weights * rec).sum() / R;
    const double once = conventions.faithfulness_coefficient(pool_leader());
    loss = loss + once * terms.faithfulness * c.faithfulness_coeff * faith;
    // The components portal: every block rank sends (the leader its V/U, the others zeros), so
    // all ranks of a block build the same graph.
    const at::Tensor flat = vu.flatten() * (pool_leader() ? 1.0 : 0.0);
    for (int p : layout_.ppgd_ranks()) tokens = tokens + portal_send(flat, world, p, portal_id(t, kTrainComponents));
    return {loss + tokens, tokens};
  }

  // PPGD: the V/U replica from the blocks, the PPGD term with the persistent sources.
  TensorTree vu;
  for (int64_t k = 0; k < layout_.n_blocks(); ++k) {
    const auto sites = layout_.sites_of_block(k);
    const int64_t numel = 2 * c.width * C * static_cast<int64_t>(sites.size());
    at::Tensor flat;
    for (int r : layout_.block_ranks(k)) {
      const at::Tensor part = portal_recv(sync, {numel}, world, r, portal_id(t, kTrainComponents));
      flat = flat.defined() ? flat + part : part;
    }
    int64_t offset = 0;
    for (int64_t site : sites) {
      vu.insert(str_cat("V.", site), flat.narrow(0, offset, c.width * C).view({c.width, C}));
      offset += c.width * C;
      vu.insert(str_cat("U.", site), flat.narrow(0, offset, C * c.width).view({C, c.width}));
      offset += C * c.width;
    }
  }
  vu = conventions.ppgd_components(vu, *groups_.ppgd);
  at::Tensor ppgd = at::zeros({mine.end - mine.begin}, sync.options());
  for (int64_t site = 0; site < S; ++site) {
    const at::Tensor g = gates.select(1, site);
    const at::Tensor a = s.persistent.at(str_cat("a.", site));
    const at::Tensor target = at::matmul(xs[site], data.target[site]);
    ppgd = ppgd + spd_site_error(spd_masked_output(vu, site, xs[site], g + (1 - g) * a), target);
  }
  return {loss + terms.ppgd * c.ppgd_coeff * (my_weights * ppgd).sum() / R, tokens};
}

TensorTree ThreePoolSpd::differentiate(const TrainState& s, int64_t t, const at::Tensor& w, const SpdTermWeights& terms,
                                       bool create_graph, at::Tensor* sources_grad) const {
  wait_portal_sends(*groups_.world);  // those of earlier passes (REPLAY's vector-Jacobian products included)
  const auto [loss, tokens] = local_loss(s, t, w, terms);
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
  if (with_sources) *sources_grad = with_values(s.persistent, grads, s.params.size()).detach().flatten();
  return setup_.conventions->reduced_gradient(role(), out, layout_);
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
  const TensorTree real = without_sync(in.params);
  OptimizerUpdate update = setup_.optimizer->update(traced ? real : real.detach(), without_sync(grads), s.opt);
  TrainState next{update.params, update.state, in.persistent};
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
  StepOutput out{next, grads};
  if (!traced) {
    out.next = detach_state(out.next);
    out.grads = out.grads.detach();
  }
  return out;
}

at::Tensor ThreePoolSpd::assemble_weight_gradient(const at::Tensor& local) const {
  wait_portal_sends(*groups_.world);
  return groups_.world->sum(local);
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
    const auto xs = spd_site_inputs(setup_.data.target, queries.narrow(0, mine.begin, mine.end - mine.begin));
    const TensorTree ci = entered(params, *groups_.ci);
    std::vector<at::Tensor> gates;
    for (int64_t site = 0; site < S; ++site) gates.push_back(spd_gates(ci, site, xs[site]));
    local = local + send_gates(layout_, world, rank_, consumers_of_gates(layout_, false), at::stack(gates, 1), Q, id);
  } else if (role() == PoolRole::kBlock) {
    const at::Tensor gates = receive_gates(layout_, world, rank_, sync, Q, S, C, id);
    const TensorTree vu = entered(params, *groups_.block);
    const auto xs = spd_site_inputs(setup_.data.target, queries.narrow(0, mine.begin, mine.end - mine.begin));
    for (int64_t site : layout_.sites_of_block(layout_.block_of(rank_))) {
      const at::Tensor target = at::matmul(xs[site], setup_.data.target[site]);
      local = local + spd_site_error(spd_masked_output(vu, site, xs[site], gates.select(1, site)), target).sum() /
                          static_cast<double>(Q);
    }
  } else {
    local = local + 0.0 * sync;
  }
  // The global Q on every rank, each rank's own part in backward (Q is a plain sum over ranks).
  return with_global_value(local, world);
}

}  // namespace magic::dist
