// Binomial checkpointing (binomial_checkpointing.h) against brute force written here: the
// closed form F(l, f) equals the recursion it solves, the split it takes attains the minimum,
// F is convex in l (what makes even segments the cheapest), and a budget's plan is the cheapest
// of every checkpoint set that fits. Then REPLAY under a budget: the walker recomputes exactly
// F's count, never holds more than the budget, and gives the unbudgeted scores bit for bit.
#include "lib/train/binomial_checkpointing.h"

#include <gtest/gtest.h>

#include <map>

#include "lib/core/intra_op_threads.h"
#include "lib/core/strings.h"
#include "lib/train/forward_training.h"
#include "lib/train/replay_backward.h"
#include "tests/support.h"

namespace magic {
namespace {

// F(l, f) by its recursion: advance m and store, reverse the later l−m with one slot fewer, then
// the first m; with no slot, advance from the start for every step.
int64_t brute_force(int64_t l, int64_t f, std::map<std::pair<int64_t, int64_t>, int64_t>& memo) {
  if (l == 1) return 0;
  if (f == 0) return l * (l - 1) / 2;
  const auto key = std::make_pair(l, f);
  if (const auto it = memo.find(key); it != memo.end()) return it->second;
  int64_t best = -1;
  for (int64_t m = 1; m < l; ++m) {
    const int64_t cost = m + brute_force(l - m, f - 1, memo) + brute_force(m, f, memo);
    if (best < 0 || cost < best) best = cost;
  }
  return memo[key] = best;
}

TEST(BinomialCheckpointing, ClosedFormIsTheRecursionsMinimumAndItsSplitAttainsIt) {
  std::map<std::pair<int64_t, int64_t>, int64_t> memo;
  int64_t compared = 0;
  for (int64_t f = 0; f <= 7; ++f) {
    for (int64_t l = 1; l <= 70; ++l) {
      const int64_t expected = brute_force(l, f, memo);
      ASSERT_EQ(fewest_recomputations(l, f), expected) << "l " << l << ", f " << f;
      const int64_t m = first_store(l, f);
      if (l > 1 && f > 0) {
        ASSERT_GE(m, 1);
        ASSERT_LT(m, l);
        EXPECT_EQ(m + brute_force(l - m, f - 1, memo) + brute_force(m, f, memo), expected) << "l " << l << ", f " << f;
      }
      if (l >= 3) {  // convex in l: increments never shrink
        EXPECT_GE(fewest_recomputations(l, f) - fewest_recomputations(l - 1, f),
                  fewest_recomputations(l - 1, f) - fewest_recomputations(l - 2, f))
            << "l " << l << ", f " << f;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8 * 70);
  // Slots for every state: one pass through the segment; none: l(l−1)/2.
  EXPECT_EQ(fewest_recomputations(1000, 999), 999);
  EXPECT_EQ(fewest_recomputations(1000, 0), 1000 * 999 / 2);
  // Large counts stay exact and cheap: β(f+1, r) passes l quickly.
  EXPECT_EQ(fewest_recomputations(1000000, 20), fewest_recomputations(1000000, 20));
  EXPECT_GT(fewest_recomputations(1000000, 20), 999999);
}

TEST(BinomialCheckpointing, ABudgetsPlanIsTheCheapestCheckpointSetThatFits) {
  int64_t sets = 0;
  for (const bool spilled : {false, true}) {
    for (int64_t n = 1; n <= 12; ++n) {
      for (int64_t states = least_budget_states(spilled); states <= 9; ++states) {
        const BudgetPlan plan = plan_budget(n, states, spilled);
        EXPECT_LE(plan.states, states);
        ASSERT_FALSE(plan.checkpoints.empty());
        EXPECT_EQ(plan.checkpoints.front(), 0);
        // Every checkpoint set holding step 0 (bit i: a checkpoint before step i + 1).
        int64_t cheapest = -1;
        for (int64_t mask = 0; mask < (int64_t{1} << (n - 1)); ++mask) {
          std::vector<int64_t> at{0};
          for (int64_t i = 0; i + 1 < n; ++i) {
            if (mask >> i & 1) at.push_back(i + 1);
          }
          const auto c = static_cast<int64_t>(at.size());
          const int64_t f = spilled ? states - 2 : states - 2 - c;
          if (f < 0) continue;
          int64_t cost = 0;
          for (size_t k = 0; k < at.size(); ++k) {
            cost += fewest_recomputations((k + 1 < at.size() ? at[k + 1] : n) - at[k], f);
          }
          if (cheapest < 0 || cost < cheapest) cheapest = cost;
          ++sets;
        }
        EXPECT_EQ(plan.recomputations, cheapest) << "n " << n << ", states " << states << (spilled ? ", spilled" : "");
      }
    }
  }
  EXPECT_GT(sets, 20000);
  EXPECT_THROW(plan_budget(10, 2, false), std::invalid_argument);
  EXPECT_THROW(plan_budget(10, 1, true), std::invalid_argument);
}

// Counts a step's untraced calls: REPLAY's recomputations.
class CountingStep : public StepFunction {
 public:
  explicit CountingStep(const StepFunction& inner) : inner_(inner) {}
  int64_t num_steps() const override { return inner_.num_steps(); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override {
    if (!traced) ++untraced;
    return inner_.step(s, t, w, traced);
  }
  TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const override {
    return inner_.gradient(state, t, w, create_graph);
  }
  mutable int64_t untraced = 0;

 private:
  const StepFunction& inner_;
};

// REPLAY under budgets from the fewest states up to sqrt's peak: the scores are the unbudgeted
// sqrt REPLAY's bit for bit (the same steps from the same states), it recomputes exactly the
// plan's count, and the most states it held stays within the budget.
TEST(BinomialCheckpointing, ReplayUnderABudgetRecomputesThePlansCountWithinIt) {
  testing::TinyRun run;
  run.optimizer = "adamw";
  run.steps = 12;
  const LmProblem p = testing::tiny_lm_problem(run);
  IntraOpThreadsScope one(1);
  CountingStep step(*p.step);
  CheckpointStore sqrt_store(checkpoint_steps(CheckpointSchedule::kSqrt, 12));
  const TrainState final_state = train_forward(step, p.initial, p.weights, &sqrt_store, {});
  const TensorTree dq = p.query->gradient(final_state.params);
  const ReplayResult expected = ReplayBackward(step, sqrt_store, p.weights).run(dq);
  const int64_t sqrt_peak = peak_states_held(CheckpointSchedule::kSqrt, 12, false);
  for (int64_t states = least_budget_states(false); states <= sqrt_peak; ++states) {
    SCOPED_TRACE(str_cat(states, " states"));
    const BudgetPlan plan = plan_budget(12, states, false);
    CheckpointStore store(plan.checkpoints);
    store.set_segment_slots(plan.segment_slots);
    train_forward(step, p.initial, p.weights, &store, {});
    step.untraced = 0;
    const ReplayResult r = ReplayBackward(step, store, p.weights).run(dq);
    EXPECT_TRUE(at::equal(r.dw, expected.dw)) << "max |difference| " << (r.dw - expected.dw).abs().max().item<double>();
    EXPECT_EQ(step.untraced, plan.recomputations);
    EXPECT_LE(r.observed_states_held, states);
  }
  // At sqrt's peak the budget recomputes no more than sqrt does (N − C).
  EXPECT_LE(plan_budget(12, sqrt_peak, false).recomputations, 12 - static_cast<int64_t>(sqrt_store.steps().size()));
}

}  // namespace
}  // namespace magic
