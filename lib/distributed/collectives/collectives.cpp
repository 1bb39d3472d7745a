#include "lib/distributed/collectives/collectives.h"

#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "lib/core/strings.h"

namespace magic::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

int64_t saved_group(AutogradContext* ctx) {
  return ctx->saved_data["group"].toInt();
}

at::Tensor summed(const at::Tensor& x, int64_t group) {
  return find_group(group)->sum(x);
}

struct AllReduceSum : Function<AllReduceSum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return summed(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {AllReduceSum::apply(grad[0], saved_group(ctx)), at::Tensor()};
  }
};

struct CopyToGroup;

struct ReduceFromGroup : Function<ReduceFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return summed(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct CopyToGroup : Function<CopyToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {ReduceFromGroup::apply(grad[0], saved_group(ctx)), at::Tensor()};
  }
};

variable_list ReduceFromGroup::backward(AutogradContext* ctx, variable_list grad) {
  return {CopyToGroup::apply(grad[0], saved_group(ctx)), at::Tensor()};
}

struct ReduceScatterSum;

struct AllGather : Function<AllGather> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return find_group(group)->all_gather(x.detach(), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct ReduceScatterSum : Function<ReduceScatterSum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return find_group(group)->reduce_scatter_sum(x.detach(), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {AllGather::apply(grad[0], saved_group(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

variable_list AllGather::backward(AutogradContext* ctx, variable_list grad) {
  return {ReduceScatterSum::apply(grad[0], saved_group(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(),
          at::Tensor()};
}

struct SplitToGroup;

// The rows (along `dim`) this member holds of a concatenation over the group's members.
at::Tensor own_slice(const at::Tensor& x, int64_t group, int64_t dim) {
  const auto g = find_group(group);
  const int64_t rows = x.size(dim) / g->size();
  return x.narrow(dim, g->rank() * rows, rows);
}

struct GatherFromGroup : Function<GatherFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    const auto g = find_group(group);
    g->require_equal_shapes(x, "gather_from_group");  // the bridge's shards: a bug can make them differ
    return g->all_gather(x.detach(), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct SplitToGroup : Function<SplitToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return own_slice(x, group, dim).clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {GatherFromGroup::apply(grad[0], saved_group(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

variable_list GatherFromGroup::backward(AutogradContext* ctx, variable_list grad) {
  return {SplitToGroup::apply(grad[0], saved_group(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
}

// The wire tag of ring shifts, apart from the portals' (multiples of 8 plus a derivative order).
constexpr int kRingShiftTag = 1 << 28;

at::Tensor shifted(const at::Tensor& x, int64_t group, int64_t offset) {
  const auto g = find_group(group);
  const int64_t n = g->size(), r = g->rank();
  const auto to = static_cast<int>(((r + offset) % n + n) % n), from = static_cast<int>(((r - offset) % n + n) % n);
  if (to == r) return x.detach().clone();
  const at::Tensor sent = x.detach().contiguous().clone();
  const auto work = g->send_async(sent, to, kRingShiftTag);
  at::Tensor received = at::empty_like(sent);
  g->recv_(received, from, kRingShiftTag);
  g->wait_send(work);
  return received;
}

// `onward`: the mutation whose backward shifts by +offset again (its own backward likewise).
struct ShiftRing : Function<ShiftRing> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t offset, bool onward) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["onward"] = onward;
    return shifted(x, group, offset);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const bool onward = ctx->saved_data["onward"].toBool();
    const int64_t offset = ctx->saved_data["offset"].toInt();
    return {ShiftRing::apply(grad[0], saved_group(ctx), onward ? offset : -offset, onward), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

// Mutation: copy_to_group whose backward sums with all_reduce_sum (backward Σ again).
struct CopyToGroupAllReduceBackward : Function<CopyToGroupAllReduceBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {AllReduceSum::apply(grad[0], saved_group(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_reduce_sum(const at::Tensor& x, const Group& group) {
  return AllReduceSum::apply(x, group.id());
}
at::Tensor reduce_from_group(const at::Tensor& x, const Group& group) {
  return ReduceFromGroup::apply(x, group.id());
}
at::Tensor copy_to_group(const at::Tensor& x, const Group& group) {
  return CopyToGroup::apply(x, group.id());
}
at::Tensor all_gather(const at::Tensor& x, const Group& group, int64_t dim) {
  return AllGather::apply(x, group.id(), dim);
}
at::Tensor reduce_scatter_sum(const at::Tensor& x, const Group& group, int64_t dim) {
  return ReduceScatterSum::apply(x, group.id(), dim);
}
at::Tensor gather_from_group(const at::Tensor& x, const Group& group, int64_t dim) {
  return GatherFromGroup::apply(x, group.id(), dim);
}
at::Tensor split_to_group(const at::Tensor& x, const Group& group, int64_t dim) {
  if (x.size(dim) % group.size() != 0) {
    throw std::invalid_argument(str_cat("split_to_group: ", x.size(dim), " rows along dim ", dim, " over ",
                                        group.size(), " members of ", group.name()));
  }
  return SplitToGroup::apply(x, group.id(), dim);
}
at::Tensor shift_ring(const at::Tensor& x, const Group& group, int64_t offset) {
  return ShiftRing::apply(x, group.id(), offset, false);
}
at::Tensor all_reduce_sum_detached(const at::Tensor& x, const Group& group) {
  return with_global_value(x, group);
}

at::Tensor with_global_value(const at::Tensor& local, const Group& group) {
  const at::Tensor detached = local.detach();
  return local + (group.sum(detached) - detached);
}
at::Tensor copy_to_group_allreduce_backward(const at::Tensor& x, const Group& group) {
  return CopyToGroupAllReduceBackward::apply(x, group.id());
}
at::Tensor shift_ring_cotangent_onward(const at::Tensor& x, const Group& group, int64_t offset) {
  return ShiftRing::apply(x, group.id(), offset, true);
}

}  // namespace magic::dist
