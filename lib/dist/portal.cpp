#include "lib/dist/portal.h"

#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <utility>

namespace magic::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

struct PendingSend {
  std::shared_ptr<const Group> group;
  c10::intrusive_ptr<c10d::Work> work;
};
thread_local std::vector<PendingSend> pending;

void post_send(const at::Tensor& x, int64_t group_id, int64_t peer, int64_t tag) {
  std::shared_ptr<const Group> group = find_group(group_id);
  pending.push_back(
      {group, group->send_async(x.detach().contiguous().clone(), static_cast<int>(peer), static_cast<int>(tag))});
}

at::Tensor receive(const std::vector<int64_t>& shape, const at::TensorOptions& options, int64_t group_id, int64_t peer,
                   int64_t tag) {
  at::Tensor y = at::empty(shape, options);
  find_group(group_id)->recv_(y, static_cast<int>(peer), static_cast<int>(tag));
  return y;
}

struct PortalRecv;

struct PortalSend : Function<PortalSend> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t peer, int64_t tag) {
    ctx->save_for_backward({x});
    ctx->saved_data["group"] = group;
    ctx->saved_data["peer"] = peer;
    ctx->saved_data["tag"] = tag;
    post_send(x, group, peer, tag);
    return at::zeros({}, x.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct PortalRecv : Function<PortalRecv> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& anchor, std::vector<int64_t> shape, int64_t group,
                            int64_t peer, int64_t tag) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["peer"] = peer;
    ctx->saved_data["tag"] = tag;
    ctx->saved_data["anchor_shape"] = anchor.sizes().vec();
    return receive(shape, anchor.options(), group, peer, tag);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    // Send the cotangent back; the token is the anchor's gradient, so a higher-order pass that
    // reaches the anchor's gradient reaches this send's own backward.
    const at::Tensor token = PortalSend::apply(grad[0], ctx->saved_data["group"].toInt(),
                                               ctx->saved_data["peer"].toInt(), ctx->saved_data["tag"].toInt() + 1);
    const auto anchor_shape = ctx->saved_data["anchor_shape"].toIntVector();
    return {token.expand(anchor_shape), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

variable_list PortalSend::backward(AutogradContext* ctx, variable_list) {
  // The cotangent of x, from the destination; anchored on x so that it can be differentiated.
  const at::Tensor x = ctx->get_saved_variables()[0];
  const at::Tensor cotangent = PortalRecv::apply(x, x.sizes().vec(), ctx->saved_data["group"].toInt(),
                                                 ctx->saved_data["peer"].toInt(), ctx->saved_data["tag"].toInt() + 1);
  return {cotangent, at::Tensor(), at::Tensor(), at::Tensor()};
}

}  // namespace

at::Tensor portal_send(const at::Tensor& x, const Group& group, int peer, int64_t tag) {
  return PortalSend::apply(x, group.id(), static_cast<int64_t>(peer), tag);
}

at::Tensor portal_recv(const at::Tensor& anchor, const std::vector<int64_t>& shape, const Group& group, int peer,
                       int64_t tag) {
  return PortalRecv::apply(anchor, shape, group.id(), static_cast<int64_t>(peer), tag);
}

void wait_portal_sends() {
  std::vector<PendingSend> sends;
  sends.swap(pending);
  for (const auto& s : sends) s.group->wait_send(s.work);
}

}  // namespace magic::dist
