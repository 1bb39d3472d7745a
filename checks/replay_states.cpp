#include "checks/replay_states.h"

#include <cstring>
#include <limits>

#include "lib/core/strings.h"

namespace magic::checks {
namespace {

// Differing entries and bits of two tensors of one shape and dtype (raw bytes, element by element).
std::pair<int64_t, int64_t> differences(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  const auto* p = static_cast<const unsigned char*>(x.data_ptr());
  const auto* q = static_cast<const unsigned char*>(y.data_ptr());
  const auto size = static_cast<int64_t>(x.element_size());
  int64_t entries = 0, bits = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t here = 0;
    for (int64_t k = 0; k < size; ++k)
      here += __builtin_popcount(static_cast<unsigned>(p[i * size + k] ^ q[i * size + k]));
    entries += here > 0 ? 1 : 0;
    bits += here;
  }
  return {entries, bits};
}

void add_tree(StateDifference& d, int64_t step, const std::string& part, const TensorTree& training,
              const TensorTree& replayed) {
  auto note = [&](const std::string& name) {
    if (d.first.empty()) d.first = str_cat("step ", step, ", ", part, ".", name);
  };
  for (const auto& e : training) {
    d.entries += e.tensor.numel();
    if (!replayed.contains(e.name)) {
      d.differing_entries += e.tensor.numel();
      d.differing_bits += e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()) * 8;
      note(e.name + " (missing)");
      continue;
    }
    const at::Tensor& r = replayed.at(e.name);
    if (r.sizes() != e.tensor.sizes() || r.scalar_type() != e.tensor.scalar_type()) {
      d.differing_entries += e.tensor.numel();
      d.differing_bits += e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()) * 8;
      note(e.name + " (shape or dtype)");
      continue;
    }
    const auto [entries, bits] = differences(e.tensor, r);
    d.differing_entries += entries;
    d.differing_bits += bits;
    if (entries > 0) note(e.name);
  }
  for (const auto& e : replayed) {
    if (training.contains(e.name)) continue;
    d.differing_entries += e.tensor.numel();
    d.differing_bits += e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()) * 8;
    note(e.name + " (extra)");
  }
}

}  // namespace

void add_state_difference(StateDifference& into, int64_t step, const TrainState& training, const TrainState& replayed) {
  into.steps += 1;
  add_tree(into, step, "params", training.params, replayed.params);
  add_tree(into, step, "opt", training.opt, replayed.opt);
  add_tree(into, step, "persistent", training.persistent, replayed.persistent);
}

void ReplayStateWatch::attach(MagicOptions& options) {
  options.on_step = [this](int64_t, const TrainState& before, const StepOutput&) {
    trained_.push_back(detach_state(before));
  };
  options.on_replay_step = [this](int64_t t, const StepVjp& vjp) {
    add_state_difference(difference_, t, trained_.at(t), vjp.state);
  };
}

NamedTensor replay_state_output(const dist::Group& world, const StateDifference& mine) {
  at::Tensor counts = at::zeros({world.size(), 2}, at::kDouble);
  counts[world.rank()][0] = static_cast<double>(mine.differing_entries);
  counts[world.rank()][1] = static_cast<double>(mine.differing_bits);
  NamedTensor out{"replay", "states", world.sum(counts)};
  out.exact = true;
  out.detail = mine.differing_entries > 0
                   ? str_cat("rank ", world.rank(), "'s first: ", mine.first)
                   : str_cat(mine.steps, " REPLAY steps of ", mine.entries, " state entries on rank ", world.rank());
  return out;
}

NamedTensor replay_state_reference(int world_size) {
  NamedTensor out{"replay", "states", at::zeros({world_size, 2}, at::kDouble)};
  out.exact = true;
  return out;
}

CheckRow replay_state_row(const NamedTensor& distributed, const NamedTensor& reference) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  CheckRow row;
  row.level = reference.level;
  row.tensor = reference.name;
  row.stats.scale = row.stats.mean_ratio = row.stats.cosine = kNan;
  const at::Tensor& counts = distributed.value;
  row.stats.worst_rel_err = counts.select(1, 0).max().item<double>();  // differing entries on the worst rank
  row.tolerance = 0.0;
  row.passed = counts.sizes() == reference.value.sizes() && at::equal(counts, reference.value);
  if (row.passed) {
    row.diagnosis.text = "bit-identical to training on every rank (" + distributed.detail + ")";
    return row;
  }
  std::vector<std::string> ranks;
  for (int64_t r = 0; r < counts.size(0); ++r) {
    const auto entries = static_cast<int64_t>(counts[r][0].item<double>());
    const auto bits = static_cast<int64_t>(counts[r][1].item<double>());
    if (entries > 0) ranks.push_back(str_cat("rank ", r, ": ", entries, " entries, ", bits, " bits"));
  }
  row.diagnosis.text =
      str_cat("REPLAY's states differ from training's (", join(ranks, "; "), "); ", distributed.detail);
  return row;
}

}  // namespace magic::checks
