#include "checks/planted_bridge.h"

#include <algorithm>
#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>

#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"

namespace magic::checks {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

class NoIntraCpSum : public dist::Bridge {
 public:
  using dist::Bridge::Bridge;

 protected:
  at::Tensor enter_cp(const at::Tensor& prefix) const override { return prefix; }
};

// Fan-out as the zero-padded sum: copy the shard over a group, take this rank's slice. Right over
// one cp level's ranks; over every cp level the adjoint counts each slice cp times.
class FanOutPooledOverCp : public dist::Bridge {
 public:
  FanOutPooledOverCp(dist::BridgeKind kind, std::shared_ptr<const dist::Group> bridge,
                     std::shared_ptr<const dist::Group> cp, std::shared_ptr<const dist::Group> pooled, int64_t slice,
                     int64_t slices)
      : dist::Bridge(kind, std::move(bridge), std::move(cp)),
        pooled_(std::move(pooled)),
        slice_(slice),
        slices_(slices) {}

 protected:
  at::Tensor fan(const at::Tensor& encoder_out) const override {
    const int64_t rows = encoder_out.size(0) / slices_;
    return dist::copy_to_group(encoder_out, *pooled_).narrow(0, slice_ * rows, rows);
  }

 private:
  std::shared_ptr<const dist::Group> pooled_;
  int64_t slice_, slices_;
};

// The slice every cp level takes, computed where cp = 0 holds it: cp > 0 ranks take the whole shard.
class FanOutCp0Slice : public dist::Bridge {
 public:
  FanOutCp0Slice(dist::BridgeKind kind, std::shared_ptr<const dist::Group> bridge,
                 std::shared_ptr<const dist::Group> cp, bool cp0)
      : dist::Bridge(kind, std::move(bridge), std::move(cp)), cp0_(cp0) {}

 protected:
  at::Tensor fan(const at::Tensor& encoder_out) const override {
    return cp0_ ? dist::Bridge::fan(encoder_out) : encoder_out;
  }

 private:
  bool cp0_;
};

// gather_from_group whose backward takes the next member's rows.
struct GatherWrongOffset : Function<GatherWrongOffset> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return dist::find_group(group)->all_gather(x.detach(), 0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto g = dist::find_group(ctx->saved_data["group"].toInt());
    const int64_t rows = grad[0].size(0) / g->size();
    return {grad[0].narrow(0, (g->rank() + 1) % g->size() * rows, rows), at::Tensor()};
  }
};

class FanInWrongOffset : public dist::Bridge {
 public:
  using dist::Bridge::Bridge;

 protected:
  at::Tensor fan(const at::Tensor& encoder_out) const override {
    return GatherWrongOffset::apply(encoder_out, bridge_->id());
  }
};

std::string needs_cp(const dist::BridgeTopology& t) {
  return t.lm.cp > 1 ? "" : "needs lm cp > 1";
}
std::string needs_fan_out_with_cp(const dist::BridgeTopology& t) {
  if (t.kind() != dist::BridgeKind::kFanOut) return "needs a fan-out bridge (encoder dp < lm dp)";
  return needs_cp(t);
}
std::string needs_fan_in(const dist::BridgeTopology& t) {
  return t.kind() == dist::BridgeKind::kFanIn ? "" : "needs a fan-in bridge (encoder dp > lm dp)";
}

}  // namespace

const std::vector<BridgeMutation>& bridge_mutations() {
  static const std::vector<BridgeMutation> catalog{
      {"bridge-no-intra-cp-sum",
       "the bridge's backward skips the sum over the lm cp group: a shard's gradient keeps its own cp rank's columns",
       "", needs_cp},
      {"bridge-fan-out-pooled-over-cp",
       "fan-out's adjoint sums over every cp level of the encoder block, not one: each slice counted cp times", "x cp",
       needs_fan_out_with_cp},
      {"bridge-fan-in-wrong-offset", "fan-in's backward takes the next encoder shard's rows, not its own", "",
       needs_fan_in},
      {"bridge-fan-out-cp0-slice",
       "fan-out's slice computed from the cp = 0 view: cp > 0 ranks take the whole shard (a shape mismatch that "
       "hangs a real bridge; here a named rank failure)",
       "", needs_fan_out_with_cp, /*ends_the_run=*/true},
  };
  return catalog;
}

bool is_bridge_mutation(const std::string& name) {
  const auto& all = bridge_mutations();
  return std::any_of(all.begin(), all.end(), [&](const BridgeMutation& m) { return m.name == name; });
}

std::unique_ptr<dist::Bridge> planted_bridge(const std::string& mutation, const dist::Runtime& runtime,
                                             const dist::BridgeLayout& layout, const dist::BridgeGroups& groups) {
  const dist::BridgeKind kind = layout.kind();
  if (mutation.empty()) return std::make_unique<dist::Bridge>(kind, groups.bridge, groups.lm.cp);
  const BridgeMutation* m = nullptr;
  for (const auto& candidate : bridge_mutations()) {
    if (candidate.name == mutation) m = &candidate;
  }
  if (m == nullptr) throw std::logic_error("planted_bridge: no bridge mutation '" + mutation + "'");
  const std::string unmet = m->unmet(layout.topology());
  if (!unmet.empty()) throw std::invalid_argument(str_cat(mutation, " on ", layout.topology().str(), ": ", unmet));
  if (mutation == "bridge-no-intra-cp-sum") return std::make_unique<NoIntraCpSum>(kind, groups.bridge, groups.lm.cp);
  if (mutation == "bridge-fan-in-wrong-offset")
    return std::make_unique<FanInWrongOffset>(kind, groups.bridge, groups.lm.cp);
  if (mutation == "bridge-fan-out-cp0-slice") {
    return std::make_unique<FanOutCp0Slice>(kind, groups.bridge, groups.lm.cp,
                                            layout.lm().cp_index(runtime.rank()) == 0);
  }
  // The encoder block's ranks of this rank's lm tp index, every cp level: the pooled group.
  const dist::MeshLayout& enc = layout.encoder();
  const dist::MeshLayout& lm = layout.lm();
  auto pooled = dist::partition_group(runtime, "bridge-pooled", [&](int r) {
    std::vector<int> members;
    for (int m = 0; m < layout.world_size(); ++m) {
      if (enc.dp_index(m) == enc.dp_index(r) && lm.tp_index(m) == lm.tp_index(r)) members.push_back(m);
    }
    return members;
  });
  const int64_t slices = layout.topology().ratio();
  const int64_t slice = lm.dp_index(runtime.rank()) % slices;
  return std::make_unique<FanOutPooledOverCp>(kind, groups.bridge, groups.lm.cp, pooled, slice, slices);
}

}  // namespace magic::checks
