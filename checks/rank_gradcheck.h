// gradcheck driven across ranks: finite differences of a function of every rank's input,
// evaluated by all ranks in lockstep (each rank holds identical copies of all inputs, perturbs
// the same entry at the same time, and feeds its own entry to the distributed computation),
// against the analytical gradient that autograd produces through the collectives.
//   kDistinctTerms:    F(X) = Σ_r f_r(X[r])      (each rank's output is a separate term)
//   kReplicatedOutput: F(X) = f(X)               (every rank computes the same value; counted once)
//   kReplicatedInput:  F(x) = Σ_r f_r(x)         (one input shared by every rank)
// With second_order, the checked function is the directional derivative
// S(X) = Σ_r <∂F/∂X[r], v_r> (v fixed, random), so the collectives' backward is differentiated.
#pragma once

#include <functional>

#include "checks/gradcheck.h"
#include "lib/distributed/runtime/group.h"

namespace magic::checks {

enum class RankSemantics { kDistinctTerms, kReplicatedOutput, kReplicatedInput };

using LocalTerm = std::function<at::Tensor(const at::Tensor& own_input)>;

// `inputs`: one tensor per rank (kReplicatedInput: exactly one). Must be called by every rank.
GradcheckResult rank_gradcheck(const dist::Group& group, const LocalTerm& local_term,
                               const std::vector<at::Tensor>& inputs, RankSemantics semantics, bool second_order,
                               const GradcheckOptions& options = {});

}  // namespace magic::checks
