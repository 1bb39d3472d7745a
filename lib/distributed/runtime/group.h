// Group: a c10d communicator over a fixed set of global ranks (Gloo moves host memory, NCCL in
// CUDA builds the ranks' GPUs' memory; docs/gpu.md). Collectives block until done and throw DistributedError naming
// the operation, the group and this rank when a peer is lost or the timeout passes. Groups are
// registered by id so that autograd Functions (which can only save plain values) can find them.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/compat.h"

namespace magic::dist {

enum class BackendKind { kGloo, kNccl };
BackendKind parse_backend(const std::string& name);
std::string backend_name(BackendKind kind);
// Whether this build can create the backend (NCCL needs a CUDA LibTorch built with NCCL).
bool backend_available(BackendKind kind);

class Group {
 public:
  // Called by every member, concurrently (the backend rendezvous through `store`).
  static std::shared_ptr<Group> create(const std::string& name, std::vector<int> ranks, int global_rank,
                                       const c10::intrusive_ptr<c10d::Store>& store, BackendKind backend,
                                       std::chrono::milliseconds timeout);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }  // index within the group
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }
  int global_rank() const { return ranks_[rank_]; }
  int64_t id() const { return id_; }
  BackendKind backend_kind() const { return kind_; }

  void all_reduce_sum_(at::Tensor& tensor) const;
  // Σ over members of `tensor`, as a new tensor outside autograd (the input is untouched).
  at::Tensor sum(const at::Tensor& tensor) const;
  // Concatenation of every member's tensor along `dim` (equal shapes).
  at::Tensor all_gather(const at::Tensor& tensor, int64_t dim) const;
  // This member's slice along `dim` of the sum over members (`dim` divisible by size()).
  at::Tensor reduce_scatter_sum(const at::Tensor& tensor, int64_t dim) const;
  void broadcast_(at::Tensor& tensor, int root) const;
  // Throws DistributedError on every member, naming `operation` and each member's shape, unless
  // all members' tensors have one shape (Gloo aborts the process on a mismatched all-gather).
  // One small all-gather: for collectives whose shapes a bug can make differ (the bridge's).
  void require_equal_shapes(const at::Tensor& tensor, const char* operation) const;
  // Posts a send and returns without waiting: the work (which keeps the tensor alive) completes
  // once the peer receives it. wait_send() waits on it, naming the operation on failure.
  c10::intrusive_ptr<c10d::Work> send_async(const at::Tensor& tensor, int destination, int tag) const;
  void wait_send(const c10::intrusive_ptr<c10d::Work>& work) const;
  void recv_(at::Tensor& tensor, int source, int tag) const;
  // A receive posted now and finished by wait_recv(), which returns the tensor received: posting
  // several before waiting lets their messages travel at once (a Gloo sender sends only once the
  // receive is posted, so receives made one at a time cost a round trip each).
  struct PostedRecv {
    at::Tensor tensor;
    std::vector<at::Tensor> wire;
    c10::intrusive_ptr<c10d::Work> work;
  };
  PostedRecv recv_async(const at::Tensor& tensor, int source, int tag) const;
  at::Tensor wait_recv(PostedRecv& posted) const;
  void barrier() const;

 private:
  Group(std::string name, std::vector<int> ranks, int rank, c10::intrusive_ptr<compat::CollectiveBackend> backend,
        BackendKind kind, at::Device device);
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* operation) const;
  // The buffer a tensor travels in, on the backend's device (device_): a tensor elsewhere travels
  // as a copy and the result is copied back, so host bookkeeping runs over NCCL and GPU ranks
  // share one GPU over Gloo. Gloo has no bf16, so bf16 travels as fp32 (exactly) and a sum of
  // bf16 tensors is rounded to bf16 once, after the sum (NCCL rounds each partial sum).
  at::Tensor on_wire(const at::Tensor& tensor) const;

  std::string name_;
  std::vector<int> ranks_;
  int rank_;
  c10::intrusive_ptr<compat::CollectiveBackend> backend_;
  BackendKind kind_;
  at::Device device_;  // where the backend moves tensors: the CPU (Gloo) or this rank's GPU (NCCL)
  int64_t id_;
};

// The live group with this id; throws std::logic_error if it is gone.
std::shared_ptr<Group> find_group(int64_t id);

}  // namespace magic::dist
