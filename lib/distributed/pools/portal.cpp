#include "lib/distributed/pools/portal.h"

#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

PortalTags tags_from_env() {
  const char* mode = std::getenv("MAGIC_PORTAL_TAGS");
  return mode != nullptr && std::string(mode) == "zero" ? PortalTags::kZero : PortalTags::kPerTransfer;
}
std::atomic<PortalTags> tag_mode{tags_from_env()};

int wire_tag(const Group& group, int64_t tag) {
  const bool zero = tag_mode.load() == PortalTags::kZero || group.backend_kind() == BackendKind::kNccl;
  return zero ? 0 : static_cast<int>(tag);
}

struct PendingSend {
  std::shared_ptr<const Group> group;
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;  // for the error: "portal 'gates' ... to rank 3"
};
std::mutex pending_mutex;
std::map<int, std::vector<PendingSend>> pending;  // by the sender's global rank

// "portal 'gates' (REPLAY step 2, derivative order 1)": where a transfer belongs.
std::string portal_text(const std::string& name, int64_t tag) {
  std::string phase = current_phase();
  return str_cat("portal '", name, "' (", phase.empty() ? "" : phase + ", ", "derivative order ", tag % 8, ")");
}

// The base tag of a portal is a multiple of 8; its derivative orders count up from it.
void post_send(const at::Tensor& x, int64_t group_id, int64_t peer, int64_t tag, const std::string& name) {
  std::shared_ptr<const Group> group = find_group(group_id);
  auto work = group->send_async(x.detach().contiguous().clone(), static_cast<int>(peer), wire_tag(*group, tag));
  const int me = group->global_rank(), to = group->ranks()[peer];
  std::string what = str_cat(portal_text(name, tag), ": rank ", me, " sent to rank ", to,
                             ", which never received it (it did not reach this portal)");
  std::lock_guard<std::mutex> lock(pending_mutex);
  pending[me].push_back({std::move(group), std::move(work), std::move(what)});
}

Group::PostedRecv post_receive(const std::vector<int64_t>& shape, const at::TensorOptions& options, const Group& group,
                               int64_t peer, int64_t tag) {
  return group.recv_async(at::empty(shape, options), static_cast<int>(peer), wire_tag(group, tag));
}

at::Tensor wait_receive(Group::PostedRecv& posted, const Group& group, int64_t peer, int64_t tag,
                        const std::string& name) {
  try {
    return group.wait_recv(posted);
  } catch (const DistributedError& e) {
    throw DistributedError(str_cat(portal_text(name, tag), ": rank ", group.global_rank(), " waited for rank ",
                                   group.ranks()[peer], ", which never sent (it did not reach this portal or died); ",
                                   e.what()));
  }
}

// A tensor received before its PortalRecv node was made (portal_recv_all). Not a Tensor argument
// to apply(), which would make it an input of the node.
struct Received {
  at::Tensor tensor;
};

void save_address(AutogradContext* ctx, int64_t group, int64_t peer, int64_t tag, const std::string& name) {
  ctx->saved_data["group"] = group;
  ctx->saved_data["peer"] = peer;
  ctx->saved_data["tag"] = tag;
  ctx->saved_data["name"] = name;
}

struct PortalRecv;

struct PortalSend : Function<PortalSend> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t peer, int64_t tag,
                            std::string name) {
    ctx->save_for_backward({x});
    save_address(ctx, group, peer, tag, name);
    post_send(x, group, peer, tag, name);
    return at::zeros({}, x.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct PortalRecv : Function<PortalRecv> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& anchor, std::vector<int64_t> shape, int64_t group,
                            int64_t peer, int64_t tag, std::string name, Received received) {
    save_address(ctx, group, peer, tag, name);
    ctx->saved_data["anchor_shape"] = anchor.sizes().vec();
    if (received.tensor.defined()) return received.tensor;
    const std::shared_ptr<const Group> g = find_group(group);
    Group::PostedRecv posted = post_receive(shape, anchor.options(), *g, peer, tag);
    return wait_receive(posted, *g, peer, tag, name);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    // Send the cotangent back; the token is the anchor's gradient, so a higher-order pass that
    // reaches the anchor's gradient reaches this send's own backward.
    const at::Tensor token =
        PortalSend::apply(grad[0], ctx->saved_data["group"].toInt(), ctx->saved_data["peer"].toInt(),
                          ctx->saved_data["tag"].toInt() + 1, ctx->saved_data["name"].toStringRef());
    const auto anchor_shape = ctx->saved_data["anchor_shape"].toIntVector();
    return {
        token.expand(anchor_shape), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

variable_list PortalSend::backward(AutogradContext* ctx, variable_list) {
  // The cotangent of x, from the destination; anchored on x so that it can be differentiated.
  const at::Tensor x = ctx->get_saved_variables()[0];
  const at::Tensor cotangent =
      PortalRecv::apply(x, x.sizes().vec(), ctx->saved_data["group"].toInt(), ctx->saved_data["peer"].toInt(),
                        ctx->saved_data["tag"].toInt() + 1, ctx->saved_data["name"].toStringRef(), Received{});
  return {cotangent, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
}

}  // namespace

void set_portal_tags(PortalTags mode) {
  tag_mode.store(mode);
}

PortalTags portal_tags() {
  return tag_mode.load();
}

at::Tensor portal_send(const at::Tensor& x, const Group& group, int peer, const PortalId& id) {
  return PortalSend::apply(x, group.id(), static_cast<int64_t>(peer), id.tag, id.name);
}

at::Tensor portal_recv(const at::Tensor& anchor, const std::vector<int64_t>& shape, const Group& group, int peer,
                       const PortalId& id) {
  return PortalRecv::apply(anchor, shape, group.id(), static_cast<int64_t>(peer), id.tag, id.name, Received{});
}

std::vector<at::Tensor> portal_recv_all(const at::Tensor& anchor, const std::vector<PortalSource>& sources,
                                        const Group& group, const PortalId& id) {
  std::vector<Group::PostedRecv> posted;
  for (const auto& source : sources)
    posted.push_back(post_receive(source.shape, anchor.options(), group, source.peer, id.tag));
  std::vector<at::Tensor> received;
  for (size_t i = 0; i < sources.size(); ++i) {
    try {
      received.push_back(wait_receive(posted[i], group, sources[i].peer, id.tag, id.name));
    } catch (...) {
      // The transport may still write into the receives not waited for: keep them alive.
      static std::vector<Group::PostedRecv>* abandoned = new std::vector<Group::PostedRecv>;
      static std::mutex abandoned_mutex;
      std::lock_guard<std::mutex> lock(abandoned_mutex);
      abandoned->insert(abandoned->end(), posted.begin() + static_cast<std::ptrdiff_t>(i) + 1, posted.end());
      throw;
    }
  }
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < sources.size(); ++i) {
    out.push_back(PortalRecv::apply(anchor, sources[i].shape, group.id(), static_cast<int64_t>(sources[i].peer), id.tag,
                                    id.name, Received{received[i]}));
  }
  return out;
}

void wait_portal_sends(const Group& group) {
  std::vector<PendingSend> sends;
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    sends.swap(pending[group.global_rank()]);
  }
  for (const auto& s : sends) {
    try {
      s.group->wait_send(s.work);
    } catch (const DistributedError& e) {
      throw DistributedError(str_cat(s.what, "; ", e.what()));
    }
  }
}

}  // namespace magic::dist
