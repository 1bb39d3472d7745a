// Binomial checkpointing (Griewank 1992; Griewank and Walther's Revolve, 2000) for REPLAY under a
// memory budget. A segment of l steps is reversed from its first state, held, with f free slots
// for more states and one working state: to trace its last untraced step t, the working state is
// advanced from the nearest held state below t, storing one state on the way while a slot is
// free. The fewest advances (recomputed steps) over all such schedules:
//   F(1, f) = 0,  F(l, 0) = l(l−1)/2,  F(l, f) = min_{0<m<l} m + F(l−m, f−1) + F(m, f)
// (advance m steps and store; reverse the later l−m with one slot fewer; free it; reverse the
// first m). In closed form, with β(s, r) = C(s + r, s) and r the least with β(f+1, r) ≥ l:
//   F(l, f) = r·l − β(f+2, r−1)
// A whole run is training's checkpoints, held through REPLAY (so that a run can resume from them),
// and between them segments reversed as above (docs/design.md, "A memory budget").
#pragma once

#include <cstdint>
#include <vector>

namespace magic {

// F(l, f): the fewest recomputed steps reversing a segment of `steps` with `free_slots`.
int64_t fewest_recomputations(int64_t steps, int64_t free_slots);

// An m attaining the minimum in F's recursion: how far to advance before storing (1 when every
// state fits; `steps` when no slot is free: advance all the way and trace).
int64_t first_store(int64_t steps, int64_t free_slots);

// A budget's schedule: training's checkpoints, the slots each segment is reversed with, and what
// REPLAY then recomputes in all.
struct BudgetPlan {
  std::vector<int64_t> checkpoints;  // strictly increasing, from 0
  int64_t segment_slots = 0;         // f: free slots beside a segment's first state
  int64_t recomputations = 0;        // Σ_k F(L_k, f)
  int64_t states = 0;                // the most held at once: checkpoints (unless spilled) + f + 2
};

// The fewest states any budget plan holds: one checkpoint, a segment's first state and the working
// state (2 when checkpoints are spilled to disk).
int64_t least_budget_states(bool spilled);

// The plan with the fewest recomputations whose states fit in `states` (at least
// least_budget_states): over every checkpoint count C, segments as even as they divide (F is
// convex in l, so even lengths are the cheapest split of N into C), f = states − 2 − C (spilled:
// states − 2, checkpoints on disk cost no memory). Ties go to fewer checkpoints.
BudgetPlan plan_budget(int64_t num_steps, int64_t states, bool spilled);

}  // namespace magic
