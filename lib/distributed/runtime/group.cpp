#include "lib/distributed/runtime/group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef MAGIC_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <gloo/common/error.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "lib/core/error.h"
#include "lib/core/run_device.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic::dist {
namespace {

std::mutex registry_mutex;
std::unordered_map<int64_t, std::weak_ptr<Group>>& registry() {
  static std::unordered_map<int64_t, std::weak_ptr<Group>> groups;
  return groups;
}
std::atomic<int64_t> next_id{1};

bool tracing() {
  static const bool trace = std::getenv("MAGIC_TRACE_COLLECTIVES") != nullptr;
  return trace;
}

// Loopback for single-machine runs; the interface named by GLOO_SOCKET_IFNAME, or the host's
// default, for runs across machines.
std::shared_ptr<::gloo::transport::Device> new_gloo_device() {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  const char* master = std::getenv("MASTER_ADDR");
  const std::string addr = master ? master : "127.0.0.1";
  if (addr == "127.0.0.1" || addr == "localhost" || addr == "::1") {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// One device a process while any group holds it: a device is a socket event loop with a thread of
// its own, which every group's connections can share (a device a group made 13 loop threads for the
// 6 rank threads of dp=3,cp=2, whose check took 19% more CPU). It ends with the last group,
// so a process whose groups are gone has no thread left and can fork ranks (launcher.h). A forked
// child makes its own: the loop thread of a device inherited from the parent is not there.
std::shared_ptr<::gloo::transport::Device> gloo_device() {
  static std::mutex mutex;
  static pid_t owner = 0;
  static std::weak_ptr<::gloo::transport::Device> shared;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<::gloo::transport::Device> device = shared.lock();
  if (!device || owner != getpid()) {
    device = new_gloo_device();
    shared = device;
    owner = getpid();
  }
  return device;
}

// Gloo throws at once when a send or receive is posted on a connection a dead peer closed: a
// DistributedError like a failed wait's, so that it reads as the consequence it is.
[[noreturn]] void lost_peer(const Group& group, const char* operation, int peer, const std::exception& e) {
  note_in_rank_log(e.what());
  const std::string phase = current_phase();
  throw DistributedError(str_cat("rank ", group.global_rank(), ": posting a ", operation, " with rank ",
                                 group.ranks()[peer], " on group '", group.name(), "'",
                                 phase.empty() ? "" : " during " + phase, " failed: a peer died: ", one_line_error(e)));
}

}  // namespace

BackendKind parse_backend(const std::string& name) {
  if (name == "gloo") return BackendKind::kGloo;
  if (name == "nccl") return BackendKind::kNccl;
  throw InputError(str_cat("--backend: unknown backend '", name, "'; expected gloo or nccl"));
}

std::string backend_name(BackendKind kind) {
  return kind == BackendKind::kGloo ? "gloo" : "nccl";
}

bool backend_available(BackendKind kind) {
#ifdef MAGIC_WITH_NCCL
  return true;
#else
  return kind == BackendKind::kGloo;
#endif
}

std::shared_ptr<Group> Group::create(const std::string& name, std::vector<int> ranks, int global_rank,
                                     const c10::intrusive_ptr<c10d::Store>& store, BackendKind kind,
                                     std::chrono::milliseconds timeout) {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) throw std::logic_error(str_cat("rank ", global_rank, " is not a member of group ", name));
  const int rank = static_cast<int>(it - ranks.begin());
  const int size = static_cast<int>(ranks.size());
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store);
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
  try {
    // The backend's rendezvous waits in the store for every member.
    WaitingScope waiting("group creation", name);
    if (kind == BackendKind::kGloo) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device());
      options->threads = 1;
      backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options);
      // Gloo's constructor returns once this member's own pairs are connected: a member that went
      // on and ended at once could close them while a peer was still finishing its handshake
      // ("Connection closed by peer" there, about 1 run in 20 of RuntimeExit's). Creation ends
      // together.
      backend->barrier()->wait(timeout);
    } else {
#ifdef MAGIC_WITH_NCCL
      // A wait blocks the host until the operation is done or the timeout passes, and throws
      // (rather than the watchdog ending the process), as a Gloo wait does.
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, options);
#else
      throw InputError("--backend nccl: this build has no NCCL (configure against a CUDA LibTorch)");
#endif
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    note_in_rank_log(e.what());
    throw DistributedError(
        str_cat("rank ", global_rank, ": creating ", backend_name(kind), " group '", name, "' of ", size,
                " ranks failed (a member did not arrive within the timeout, or died): ", one_line_error(e)));
  }
  // NCCL's members are the ranks' GPUs: this rank's is its thread's current CUDA device (use_device).
  const at::Device device = kind == BackendKind::kNccl ? current_device(DeviceKind::kCuda) : at::Device(at::kCPU);
  std::shared_ptr<Group> group(new Group(name, std::move(ranks), rank, backend, kind, device));
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[group->id_] = group;
  return group;
}

Group::Group(std::string name, std::vector<int> ranks, int rank, c10::intrusive_ptr<compat::CollectiveBackend> backend,
             BackendKind kind, at::Device device)
    : name_(std::move(name)),
      ranks_(std::move(ranks)),
      rank_(rank),
      backend_(std::move(backend)),
      kind_(kind),
      device_(device),
      id_(next_id++) {}

Group::~Group() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(id_);
}

std::shared_ptr<Group> find_group(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(id);
  std::shared_ptr<Group> group = it == registry().end() ? nullptr : it->second.lock();
  if (!group) throw std::logic_error(str_cat("no live process group with id ", id));
  return group;
}

void Group::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* operation) const {
  if (tracing()) std::fprintf(stderr, "[collective] rank %d %s on '%s'\n", global_rank(), operation, name_.c_str());
  WaitingScope waiting(operation, name_);
  try {
    work->wait();
  } catch (const std::exception& e) {
    note_in_rank_log(e.what());
    const std::string phase = current_phase();
    throw DistributedError(str_cat("rank ", global_rank(), ": ", operation, " on group '", name_, "' (", size(),
                                   " ranks, ", backend_name(kind_), ")", phase.empty() ? "" : " during " + phase,
                                   " failed: a peer died or the timeout passed: ", one_line_error(e)));
  }
}

at::Tensor Group::on_wire(const at::Tensor& tensor) const {
  const at::Tensor placed = tensor.device() == device_ ? tensor : tensor.to(device_);
  const bool widen = kind_ == BackendKind::kGloo && placed.scalar_type() == at::kBFloat16;
  return widen ? placed.to(at::kFloat) : placed.is_contiguous() ? placed : placed.contiguous();
}

void Group::all_reduce_sum_(at::Tensor& tensor) const {
  // Members' tensors have one shape (Gloo requires it): an empty one is empty everywhere (a dp
  // rank beyond the batch's rows), and Gloo's collectives divide by the byte count.
  if (tensor.numel() == 0) return;
  std::vector<at::Tensor> buffers{on_wire(tensor)};
  wait(backend_->allreduce(buffers), "all_reduce");
  if (!buffers[0].is_same(tensor)) tensor.copy_(buffers[0]);
}

at::Tensor Group::sum(const at::Tensor& tensor) const {
  at::Tensor total = tensor.detach().contiguous().clone();
  all_reduce_sum_(total);
  return total;
}

at::Tensor Group::all_gather(const at::Tensor& tensor, int64_t dim) const {
  if (tensor.numel() == 0) return at::cat(std::vector<at::Tensor>(size(), tensor), dim);  // see all_reduce_sum_
  std::vector<at::Tensor> inputs{on_wire(tensor).contiguous()};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(inputs[0]));
  wait(backend_->allgather(outputs, inputs), "all_gather");
  return at::cat(outputs[0], dim).to(tensor.device(), tensor.scalar_type());
}

at::Tensor Group::reduce_scatter_sum(const at::Tensor& tensor, int64_t dim) const {
  // Gloo in LibTorch 1.13 has no reduce_scatter: an all_reduce then this member's slice.
  const int64_t length = tensor.size(dim);
  if (length % size() != 0) {
    throw std::invalid_argument(str_cat("reduce_scatter on group '", name_, "': dimension of ", length,
                                        " does not divide into ", size(), " shards"));
  }
  at::Tensor summed = tensor.contiguous().clone();
  all_reduce_sum_(summed);
  const int64_t shard = length / size();
  return summed.narrow(dim, rank_ * shard, shard).contiguous();
}

void Group::require_equal_shapes(const at::Tensor& tensor, const char* operation) const {
  constexpr int64_t kMaxDims = 8;
  at::Tensor shape = at::full({1, kMaxDims + 1}, -1, at::kLong);
  shape[0][0] = tensor.dim();
  for (int64_t d = 0; d < std::min<int64_t>(tensor.dim(), kMaxDims); ++d) shape[0][d + 1] = tensor.size(d);
  const at::Tensor all = all_gather(shape, 0);
  if (at::equal(all, shape.expand_as(all))) return;
  std::vector<std::string> shown;
  for (int r = 0; r < size(); ++r) {
    std::vector<std::string> dims;
    for (int64_t d = 0; d < std::min<int64_t>(all[r][0].item<int64_t>(), kMaxDims); ++d)
      dims.push_back(std::to_string(all[r][d + 1].item<int64_t>()));
    shown.push_back(str_cat("rank ", ranks_[r], " [", join(dims, ", "), "]"));
  }
  const std::string phase = current_phase();
  throw DistributedError(str_cat("rank ", global_rank(), ": ", operation, " on group '", name_, "'",
                                 phase.empty() ? "" : " during " + phase, ": the members' shapes differ (",
                                 join(shown, ", "), ")"));
}

void Group::broadcast_(at::Tensor& tensor, int root) const {
  std::vector<at::Tensor> buffers{on_wire(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait(backend_->broadcast(buffers, options), "broadcast");
  if (!buffers[0].is_same(tensor)) tensor.copy_(buffers[0]);
}

c10::intrusive_ptr<c10d::Work> Group::send_async(const at::Tensor& tensor, int destination, int tag) const {
  if (tracing())
    std::fprintf(stderr, "[collective] rank %d posts send to %d tag %d\n", global_rank(), destination, tag);
  std::vector<at::Tensor> buffers{on_wire(tensor).contiguous()};
  try {
    return backend_->send(buffers, destination, tag);
  } catch (const ::gloo::IoException& e) {
    lost_peer(*this, "send", destination, e);
  }
}

void Group::wait_send(const c10::intrusive_ptr<c10d::Work>& work) const {
  wait(work, "send");
}

void Group::recv_(at::Tensor& tensor, int source, int tag) const {
  PostedRecv posted = recv_async(tensor, source, tag);
  wait_recv(posted);
}

Group::PostedRecv Group::recv_async(const at::Tensor& tensor, int source, int tag) const {
  if (tracing()) std::fprintf(stderr, "[collective] rank %d recv from %d tag %d\n", global_rank(), source, tag);
  PostedRecv posted{tensor, {on_wire(tensor)}, {}};
  try {
    posted.work = backend_->recv(posted.wire, source, tag);
  } catch (const ::gloo::IoException& e) {
    lost_peer(*this, "receive", source, e);
  }
  return posted;
}

at::Tensor Group::wait_recv(PostedRecv& posted) const {
  wait(posted.work, "recv");
  if (!posted.wire[0].is_same(posted.tensor)) posted.tensor.copy_(posted.wire[0]);
  return posted.tensor;
}

void Group::barrier() const {
  wait(backend_->barrier(), "barrier");
}

}  // namespace magic::dist
