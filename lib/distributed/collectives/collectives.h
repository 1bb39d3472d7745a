// Differentiable collectives (docs/design.md, "Distribution"): autograd Functions whose backward is built
// from the same Functions, so the graph survives create_graph and derivatives of any order
// cross ranks correctly.
//
//   op                  forward                        backward
//   all_reduce_sum      Σ_r x_r (each output a term)   all_reduce_sum
//   reduce_from_group   Σ_r x_r, output replicated     copy_to_group (identity)
//   copy_to_group       identity (replicated input)    reduce_from_group (Σ)
//   all_gather          concat_r x_r                   reduce_scatter_sum
//   reduce_scatter_sum  shard_r(Σ_r x_r)               all_gather
//   gather_from_group   concat_r x_r (replicated)      this rank's slice (its cotangent replicated)
//   split_to_group      this rank's slice (of a        gather_from_group
//                       replicated input)
//   shift_ring(k)       member r − k's x (cyclic)      shift_ring(−k)
//
// Pairing: a replicated value consumed identically on every rank must come out of
// reduce_from_group; reduced with a plain all_reduce_sum its cotangent is counted once per rank.
// Likewise, a replicated input used differently on each rank enters through copy_to_group so
// that its gradient sums the ranks' contributions.
#pragma once

#include <ATen/ATen.h>

#include "lib/distributed/runtime/group.h"

namespace magic::dist {

at::Tensor all_reduce_sum(const at::Tensor& x, const Group& group);
at::Tensor reduce_from_group(const at::Tensor& x, const Group& group);
at::Tensor copy_to_group(const at::Tensor& x, const Group& group);
at::Tensor all_gather(const at::Tensor& x, const Group& group, int64_t dim = 0);
at::Tensor reduce_scatter_sum(const at::Tensor& x, const Group& group, int64_t dim = 0);

// Megatron's gather/scatter pair: a concatenation every member then uses identically (so its
// cotangent is replicated, counted once), and its adjoint; the bridge's fan-in and fan-out
// (bridge.h). split_to_group needs x.size(dim) divisible by the group's size.
at::Tensor gather_from_group(const at::Tensor& x, const Group& group, int64_t dim = 0);
at::Tensor split_to_group(const at::Tensor& x, const Group& group, int64_t dim = 0);

// The ring step of ring attention: each member sends x to member (r + offset) mod n and returns
// what member (r − offset) mod n sent; its adjoint shifts the cotangents back by −offset (a dK,
// dV block returns to the member that owns it). Point to point, so every member must run the
// same shifts in the same order, in the backward too: identical graphs on every member, as the
// ring's blocks of equal shape give. x must have the same shape on every member; the caller checks
// that once (Group::require_equal_shapes), not at every step of its ring.
at::Tensor shift_ring(const at::Tensor& x, const Group& group, int64_t offset = 1);

// A sum over ranks outside autograd, DDP-hook style: x + (Σ_r x_r - x) with the bracket
// detached. The value is the global sum, the derivative keeps only this rank's term, so a
// gradient reduced this way loses its cross-rank second-order terms (the bug class of a
// collective whose backward is not itself differentiable, pytorch#160509). Planted by the
// detached-collective mutation, never used otherwise.
at::Tensor all_reduce_sum_detached(const at::Tensor& x, const Group& group);

// Global value forward, local part backward, for a quantity that is a plain sum over ranks:
//   local + (Σ_r local_r - local), the bracket detached. Exact at every derivative order only
// when nothing nonlinear is applied to the sum (a nonlinear function of it needs the
// differentiable all_reduce_sum; see three_pool_spd.h).
at::Tensor with_global_value(const at::Tensor& local, const Group& group);
// A copy_to_group whose backward reduces with all_reduce_sum: the replicated-allreduce-backward
// mutation (second derivatives counted once per rank).
at::Tensor copy_to_group_allreduce_backward(const at::Tensor& x, const Group& group);
// A shift_ring whose backward shifts the cotangents on by +offset instead of back: ring
// attention's dK/dV not returned to its owner (the same as shift_ring on two members).
at::Tensor shift_ring_cotangent_onward(const at::Tensor& x, const Group& group, int64_t offset = 1);

}  // namespace magic::dist
