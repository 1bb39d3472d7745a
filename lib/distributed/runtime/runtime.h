// Runtime: this process's place in a distributed world. Ranks rendezvous through a c10d
// TCPStore at MASTER_ADDR:MASTER_PORT using torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), so the same binary runs under our spawn launcher, torchrun or srun.
// The store is hosted by rank 0 unless the launcher hosts it (TORCHELASTIC_USE_AGENT_STORE=True,
// as torchrun's agent does). Tests run ranks as threads over one in-memory store instead.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/distributed/runtime/group.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/rank_failure.h"

namespace magic::dist {

struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // the launcher hosts the store; every rank is a client

  // Throws InputError naming a missing or malformed variable.
  static Rendezvous from_env();
};

class Runtime {
 public:
  static std::unique_ptr<Runtime> connect(const Rendezvous& rendezvous, BackendKind backend,
                                          std::chrono::milliseconds timeout);
  // Publishes this thread's progress (progress.h) through `progress_store`, or through `store`
  // when none is given (it must then be safe to share between threads, as HashStore is).
  Runtime(int rank, int world_size, c10::intrusive_ptr<c10d::Store> store, BackendKind backend,
          std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> progress_store = {});

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<Group>& world() const { return world_; }
  // A store client for a thread of this rank's own (the tracer's relay): a new connection to the
  // rendezvous store where clients cannot be shared between threads; the store itself otherwise.
  c10::intrusive_ptr<c10d::Store> store_for_another_thread() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Every rank calls it with the same arguments, in the same order (as torch.distributed's
  // new_group); non-members get nullptr. Each call gets its own rendezvous keys.
  std::shared_ptr<Group> new_group(const std::string& name, const std::vector<int>& ranks) const;
  // As new_group, but made once: a later call with the same name and ranks returns the same
  // group, so a check's clean run and its mutations' runs share their groups (creating a group
  // is a rendezvous of its members and a mesh of connections). Lives as long as this Runtime.
  std::shared_ptr<Group> shared_group(const std::string& name, const std::vector<int>& ranks) const;

  // For a rank process about to end: stops publishing progress (its last state published) and
  // keeps every group made here alive to the end, so that the kernel closes their connections at
  // exit instead of each being closed in turn through its Gloo event loop (up to 0.1 s on ten
  // ranks). A rank ends after its last collective, so no peer still needs these connections.
  void keep_connections_until_exit();

  // For a rank that failed: stops publishing progress (its last state published, the failed wait
  // included) and leaves `failure` in the store for the launcher, before this Runtime's groups
  // close their connections (best effort: a store that fails is not waited for again).
  void record_failure(const RankFailure& failure);

 private:
  int rank_, world_size_;
  c10::intrusive_ptr<c10d::Store> store_;
  BackendKind backend_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> progress_store_;
  std::unique_ptr<ProgressPublisher> progress_;
  std::shared_ptr<Group> world_;
  std::function<c10::intrusive_ptr<c10d::Store>()> connect_client_;  // set by connect()
  mutable int64_t groups_created_ = 0;
  mutable std::map<std::pair<std::string, std::vector<int>>, std::shared_ptr<Group>> shared_groups_;
};

// Runs fn(runtime) on `world_size` threads of this process, each rank with its own Runtime
// over a shared in-memory store. A failure throws RankFailed (a DistributedError): the rank that
// failed first with its own error, else the first to fail, and every rank's failure.
void run_ranks_in_threads(int world_size, const std::function<void(Runtime&)>& fn,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace magic::dist
