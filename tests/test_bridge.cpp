// The encoder/LM bridge (lib/distributed/parallel/bridge.h) across real Gloo ranks (threads):
// the gradient and the Hessian-vector product that reach each rank's encoder shard equal one
// process's, with no bridge, for a loss whose numerator and denominator sum over the language
// model's dp x cp ranks; on fan-in, fan-out and equal layouts, with and without cp and tp. Each
// planted bridge bug (checks/planted_bridge.h) changes a shard's gradient as its description
// says. The layout's groups partition the world and carry the rows each side expects.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <map>
#include <set>

#include "checks/planted_bridge.h"
#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/parallel/bridge.h"
#include "lib/distributed/parallel/bridge_layout.h"
#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/runtime/runtime.h"
#include "tests/support.h"

namespace magic {
namespace {

// The prefix's columns split into 2·cp zig-zag chunks for every cp used here (2, 3, 4).
constexpr int64_t kPrefix = 24, kWidth = 3;

at::Tensor seeded(const std::string& what, int64_t rows) {
  auto gen = make_generator(derive_seed(17, what));
  return at::randn({rows, kPrefix, kWidth}, gen, at::TensorOptions().dtype(at::kDouble));
}

struct Inputs {
  at::Tensor encoder_out, w, u, direction;  // every row of the global batch
};

Inputs inputs(int64_t rows) {
  return {seeded("encoder", rows), seeded("w", rows), seeded("u", rows), seeded("v", rows)};
}

// L(E) = Σ w·sin(E) / (1 + Σ u·E²): a numerator and a denominator over the whole batch.
at::Tensor loss(const at::Tensor& n, const at::Tensor& d) {
  return n / (1.0 + d);
}

struct Derivatives {
  at::Tensor grad, hvp;
};

Derivatives one_process(const Inputs& in) {
  at::Tensor e = in.encoder_out.clone().requires_grad_(true);
  const at::Tensor l = loss((in.w * e.sin()).sum(), (in.u * e * e).sum());
  const at::Tensor g = torch::autograd::grad({l}, {e}, {}, true, true)[0];
  const at::Tensor hvp = torch::autograd::grad({(g * in.direction).sum()}, {e})[0];
  return {g.detach(), hvp};
}

at::Tensor summed(const at::Tensor& x, const std::shared_ptr<const dist::Group>& group) {
  return group ? dist::reduce_from_group(x, *group) : x;
}

// This rank's gradient and H·v on its encoder shard, through the bridge `mutation` plants ("":
// the correct one).
Derivatives on_rank(dist::Runtime& rt, const dist::BridgeLayout& layout, const Inputs& in, int64_t rows,
                    const std::string& mutation = "") {
  const dist::BridgeGroups groups = dist::make_bridge_groups(rt, layout);
  const int r = rt.rank();
  const auto [enc_first, enc_rows] = layout.encoder_rows(r, rows);
  const auto [lm_first, lm_rows] = layout.lm_rows(r, rows);
  const at::Tensor columns = dist::zigzag_columns(kPrefix, layout.lm().cp(), layout.lm().cp_index(r));
  const auto bridge = checks::planted_bridge(mutation, rt, layout, groups);
  at::Tensor e = in.encoder_out.narrow(0, enc_first, enc_rows).clone().requires_grad_(true);
  const at::Tensor x = bridge->to_lm(e, columns);
  auto mine = [&](const at::Tensor& t) { return t.narrow(0, lm_first, lm_rows).index_select(1, columns); };
  const at::Tensor n = summed((mine(in.w) * x.sin()).sum(), groups.lm.batch);
  const at::Tensor d = summed((mine(in.u) * x * x).sum(), groups.lm.batch);
  const at::Tensor g = torch::autograd::grad({loss(n, d)}, {e}, {}, true, true)[0];
  // Σ over encoder shards of g·v, once: its gradient is H·v on every copy of the shard.
  const at::Tensor s = summed((g * in.direction.narrow(0, enc_first, enc_rows)).sum(), groups.encoder.replica);
  const at::Tensor hvp = torch::autograd::grad({s}, {e})[0];
  return {g.detach(), hvp};
}

// A layout, a batch both sides split (two rows per shard of the larger dp), and one process's
// derivatives on it.
struct BridgeRun {
  explicit BridgeRun(const std::string& text)
      : topology(dist::BridgeTopology::parse(text)),
        layout(topology),
        rows(2 * std::max(topology.encoder.dp, topology.lm.dp)),
        in(inputs(rows)),
        expected(one_process(in)) {}
  dist::BridgeTopology topology;
  dist::BridgeLayout layout;
  int64_t rows;
  Inputs in;
  Derivatives expected;
};

class BridgeLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(BridgeLayouts, EveryShardGetsOneProcesssGradientAndHessianVectorProduct) {
  const BridgeRun run(GetParam());
  const dist::BridgeLayout& layout = run.layout;
  const Derivatives& expected = run.expected;
  dist::run_ranks_in_threads(layout.world_size(), [&](dist::Runtime& rt) {
    const auto [first, count] = layout.encoder_rows(rt.rank(), run.rows);
    const Derivatives got = on_rank(rt, layout, run.in, run.rows);
    EXPECT_TRUE(at::allclose(got.grad, expected.grad.narrow(0, first, count), 1e-12, 1e-12))
        << GetParam() << ": gradient on rank " << rt.rank();
    EXPECT_TRUE(at::allclose(got.hvp, expected.hvp.narrow(0, first, count), 1e-12, 1e-12))
        << GetParam() << ": H v on rank " << rt.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(FanInFanOutEqual, BridgeLayouts,
                         ::testing::Values("enc=tp2,dp4;lm=tp2,dp2,cp2", "enc=tp4,dp2;lm=tp1,dp4,cp2",
                                           "enc=dp4;lm=dp2,cp2", "enc=tp2,dp2;lm=dp4", "enc=tp2,dp2;lm=dp2,cp2"),
                         [](const auto& info) { return magic::testing::test_name(info.param); });

// Each planted bridge bug on a layout whose sizes differ (the factor it shows is then its own):
// without the intra-cp sum a shard keeps its own cp rank's columns; fan-out's adjoint pooled over
// every cp level counts each slice cp times; fan-in's adjoint at the next member's offset hands
// each shard its neighbour's gradient.
struct PlantedCase {
  std::string mutation, topology;
};

TEST(PlantedBridge, EachBugChangesTheShardsGradientAsDescribed) {
  for (const PlantedCase& c : {PlantedCase{"bridge-no-intra-cp-sum", "enc=tp2,dp4;lm=dp2,cp4"},
                               PlantedCase{"bridge-fan-out-pooled-over-cp", "enc=tp6,dp2;lm=dp4,cp3"},
                               PlantedCase{"bridge-fan-in-wrong-offset", "enc=tp2,dp4;lm=dp2,cp4"}}) {
    const BridgeRun run(c.topology);
    const dist::BridgeTopology& topology = run.topology;
    const dist::BridgeLayout& layout = run.layout;
    const Derivatives& expected = run.expected;
    dist::run_ranks_in_threads(layout.world_size(), [&](dist::Runtime& rt) {
      const auto [first, count] = layout.encoder_rows(rt.rank(), run.rows);
      const Derivatives got = on_rank(rt, layout, run.in, run.rows, c.mutation);
      const at::Tensor want = expected.grad.narrow(0, first, count);
      EXPECT_FALSE(at::allclose(got.grad, want, 1e-6, 1e-6)) << c.mutation << " rank " << rt.rank();
      if (c.mutation == "bridge-no-intra-cp-sum") {
        const at::Tensor mine = dist::zigzag_columns(kPrefix, topology.lm.cp, layout.lm().cp_index(rt.rank()));
        EXPECT_TRUE(at::allclose(got.grad.index_select(1, mine), want.index_select(1, mine), 1e-12, 1e-12));
      } else if (c.mutation == "bridge-fan-out-pooled-over-cp") {
        EXPECT_TRUE(at::allclose(got.grad, topology.lm.cp * want, 1e-12, 1e-12)) << "x cp on rank " << rt.rank();
      } else {
        // Shards 2k and 2k+1 of one lm dp index trade gradients.
        const int64_t partner = (first / count) ^ 1;
        EXPECT_TRUE(at::allclose(got.grad, expected.grad.narrow(0, partner * count, count), 1e-12, 1e-12));
      }
    });
  }
}

TEST(PlantedBridge, EachBugSaysWhereItDoesNotApply) {
  const auto fan_in = dist::BridgeTopology::parse("enc=tp2,dp4;lm=dp2,cp4");
  const auto fan_out_no_cp = dist::BridgeTopology::parse("enc=tp2,dp2;lm=dp4");
  std::map<std::string, std::string> unmet;
  for (const auto& m : checks::bridge_mutations()) {
    EXPECT_FALSE(m.description.empty()) << m.name;
    unmet[m.name + " fan-in"] = m.unmet(fan_in);
    unmet[m.name + " fan-out"] = m.unmet(fan_out_no_cp);
  }
  EXPECT_EQ(unmet.at("bridge-no-intra-cp-sum fan-in"), "");
  EXPECT_EQ(unmet.at("bridge-no-intra-cp-sum fan-out"), "needs lm cp > 1");
  EXPECT_EQ(unmet.at("bridge-fan-out-pooled-over-cp fan-in"), "needs a fan-out bridge (encoder dp < lm dp)");
  EXPECT_EQ(unmet.at("bridge-fan-out-pooled-over-cp fan-out"), "needs lm cp > 1");
  EXPECT_EQ(unmet.at("bridge-fan-in-wrong-offset fan-in"), "");
  EXPECT_NE(unmet.at("bridge-fan-in-wrong-offset fan-out"), "");
}

// Shards of different shapes (a fan-out slice taken from the cp = 0 view hands cp > 0 ranks the
// whole batch) would make Gloo abort the process mid-gather; every rank instead fails naming the
// operation and each member's shape.
TEST(Bridge, ShardsOfDifferentShapesFailNamingEachRanksShape) {
  std::vector<std::string> messages(2);
  EXPECT_ANY_THROW(dist::run_ranks_in_threads(
      2,
      [&](dist::Runtime& rt) {
        try {
          dist::gather_from_group(at::ones({rt.rank() == 0 ? 2 : 3, 4}, at::kDouble), *rt.world());
        } catch (const DistributedError& e) {
          messages[rt.rank()] = e.what();
          throw;
        }
      },
      std::chrono::seconds(20)));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find(str_cat("rank ", r, ": gather_from_group on group")), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("the members' shapes differ (rank 0 [2, 4], rank 1 [3, 4])"), std::string::npos)
        << messages[r];
  }
}

// Every (encoder, language model) layout of up to 8 ranks: the bridge groups partition the world,
// and a group's members carry the rows the other side expects (fan-in: the encoder shards in
// order make the lm shard; fan-out: the lm shards in order make the encoder shard).
TEST(BridgeLayout, GroupsPartitionTheWorldAndCarryTheRowsEachSideExpects) {
  int64_t layouts = 0;
  for (int64_t a = 1; a <= 8; ++a) {
    for (int64_t b = 1; a * b <= 8; ++b) {
      for (int64_t c = 1; c <= a * b; ++c) {
        for (int64_t e = 1; c * e <= a * b; ++e) {
          if ((a * b) % (c * e) != 0) continue;
          const int64_t d = a * b / (c * e);
          if (b % d != 0 && d % b != 0) continue;
          const auto topology =
              dist::BridgeTopology::parse("enc=tp" + std::to_string(a) + ",dp" + std::to_string(b) + ";lm=tp" +
                                          std::to_string(c) + ",dp" + std::to_string(d) + ",cp" + std::to_string(e));
          const dist::BridgeLayout layout(topology);
          const int64_t rows = 2 * std::max(b, d);
          std::multiset<int> seen;
          for (int r = 0; r < layout.world_size(); ++r) {
            const std::vector<int> group = layout.bridge_group(r);
            ASSERT_EQ(static_cast<int64_t>(group.size()),
                      topology.kind() == dist::BridgeKind::kEqual ? 1 : topology.ratio())
                << topology.str() << " rank " << r;
            if (group.front() == r) seen.insert(group.begin(), group.end());
            ASSERT_NE(std::find(group.begin(), group.end(), r), group.end()) << topology.str();
            // The rows the group's members concatenate, in group order.
            const bool fan_in = topology.kind() == dist::BridgeKind::kFanIn;
            int64_t next = fan_in ? layout.lm_rows(r, rows).first : layout.encoder_rows(r, rows).first;
            for (int m : group) {
              const auto part = fan_in ? layout.encoder_rows(m, rows) : layout.lm_rows(m, rows);
              if (topology.kind() == dist::BridgeKind::kEqual) {
                EXPECT_EQ(layout.encoder_rows(m, rows), layout.lm_rows(m, rows)) << topology.str();
              }
              EXPECT_EQ(part.first, next) << topology.str() << " rank " << r << " member " << m;
              next += part.second;
            }
            const auto whole = fan_in ? layout.lm_rows(r, rows) : layout.encoder_rows(r, rows);
            EXPECT_EQ(next, whole.first + whole.second) << topology.str() << " rank " << r;
          }
          EXPECT_EQ(seen.size(), static_cast<size_t>(layout.world_size())) << topology.str();
          EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), seen.size()) << topology.str() << ": a rank twice";
          ++layouts;
        }
      }
    }
  }
  EXPECT_GE(layouts, 40) << "layouts enumerated";
}

}  // namespace
}  // namespace magic
