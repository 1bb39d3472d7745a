#include "lib/train/binomial_checkpointing.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {
namespace {

// C(n, k) exactly, or `cap` once it passes cap.
int64_t binomial_capped(int64_t n, int64_t k, int64_t cap) {
  k = std::min(k, n - k);
  if (k < 0) return 0;
  __int128 c = 1;
  for (int64_t i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;  // exact: C(n-k+i, i) after each step
    if (c > cap) return cap;
  }
  return static_cast<int64_t>(c);
}

}  // namespace

int64_t fewest_recomputations(int64_t l, int64_t f) {
  if (l < 1 || f < 0) throw std::invalid_argument(str_cat("fewest_recomputations(", l, ", ", f, ")"));
  if (l == 1) return 0;
  if (f >= l - 1) return l - 1;  // every state fits: advance once through the segment
  // r: the least with β(f+1, r) = C(f+1+r, r) ≥ l.
  int64_t r = 0;
  while (binomial_capped(f + 1 + r, r, l) < l) ++r;
  const int64_t cap = std::numeric_limits<int64_t>::max() / 2;
  return r * l - binomial_capped(f + 1 + r, r - 1, cap);  // β(f+2, r−1) = C(f+1+r, r−1)
}

int64_t first_store(int64_t l, int64_t f) {
  if (l < 1 || f < 0) throw std::invalid_argument(str_cat("first_store(", l, ", ", f, ")"));
  if (f == 0 || l == 1) return l;
  if (f >= l - 1) return 1;
  // g(m) = m + F(l−m, f−1) + F(m, f) is convex in m: the first m whose next is no lower.
  const auto g = [&](int64_t m) { return m + fewest_recomputations(l - m, f - 1) + fewest_recomputations(m, f); };
  int64_t lo = 1, hi = l - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (g(mid + 1) >= g(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

int64_t least_budget_states(bool spilled) {
  return spilled ? 2 : 3;
}

BudgetPlan plan_budget(int64_t n, int64_t states, bool spilled) {
  if (n < 1) throw std::invalid_argument(str_cat("plan_budget: need >= 1 step, got ", n));
  if (states < least_budget_states(spilled)) {
    throw std::invalid_argument(
        str_cat("plan_budget: ", states, " states, below the least ", least_budget_states(spilled)));
  }
  const int64_t most_checkpoints = spilled ? n : std::min(n, states - 2);
  const auto slots = [&](int64_t c) { return spilled ? states - 2 : states - 2 - c; };
  const auto cost = [&](int64_t c) {  // `longer` segments of q + 1 steps, the rest of q
    const int64_t q = n / c, longer = n % c;
    return longer * fewest_recomputations(q + 1, slots(c)) + (c - longer) * fewest_recomputations(q, slots(c));
  };
  int64_t best = 1, best_cost = cost(1);
  for (int64_t c = 2; c <= most_checkpoints && best_cost > 0; ++c) {
    const int64_t this_cost = cost(c);
    if (this_cost < best_cost) best = c, best_cost = this_cost;
  }
  BudgetPlan plan;
  plan.segment_slots = slots(best);
  plan.recomputations = best_cost;
  plan.states = (spilled ? 0 : best) + plan.segment_slots + 2;
  const int64_t q = n / best, longer = n % best;
  for (int64_t k = 0, at = 0; k < best; ++k) {
    plan.checkpoints.push_back(at);
    at += q + (k < longer ? 1 : 0);
  }
  return plan;
}

}  // namespace magic
