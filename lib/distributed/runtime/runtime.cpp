#include "lib/distributed/runtime/runtime.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "lib/core/error.h"
#include "lib/core/library_log.h"
#include "lib/core/run_device.h"
#include "lib/core/strings.h"

namespace magic::dist {
namespace {

int env_int(const char* name, std::optional<int> fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    if (fallback) return *fallback;
    throw InputError(str_cat("environment variable ", name,
                             " is not set; --launch env expects torchrun's "
                             "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"));
  }
  errno = 0;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*end != '\0' || errno != 0 || parsed < 0) {
    throw InputError(str_cat("environment variable ", name, "='", value, "' is not a non-negative integer"));
  }
  return static_cast<int>(parsed);
}

// A name that does not resolve fails at once, by name, rather than after the store's timeout.
void require_resolvable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) freeaddrinfo(found);
  if (error != 0) {
    throw InputError(str_cat("environment variable MASTER_ADDR='", host, "' cannot be resolved (", gai_strerror(error),
                             "); expected the host name or address of rank 0's machine"));
  }
}

}  // namespace

Rendezvous Rendezvous::from_env() {
  Rendezvous r;
  r.rank = env_int("RANK", std::nullopt);
  r.world_size = env_int("WORLD_SIZE", std::nullopt);
  r.local_rank = env_int("LOCAL_RANK", r.rank);
  // Both are required, as torch.distributed's env:// requires them: a silent default port would
  // meet whatever else listens there and fail a minute later at the store's timeout.
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') {
    throw InputError(
        "environment variable MASTER_ADDR is not set; --launch env expects torchrun's RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT");
  }
  r.master_addr = addr;
  require_resolvable(r.master_addr);
  r.master_port = env_int("MASTER_PORT", std::nullopt);
  if (r.master_port < 1 || r.master_port > 65535) {
    throw InputError(str_cat("environment variable MASTER_PORT='", std::getenv("MASTER_PORT"),
                             "' is not a TCP port (expected 1 to 65535)"));
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  r.agent_store = agent != nullptr && std::string(agent) == "True";
  if (r.world_size < 1 || r.rank >= r.world_size) {
    throw InputError(str_cat("RANK=", r.rank, " and WORLD_SIZE=", r.world_size, ": need 0 <= RANK < WORLD_SIZE"));
  }
  return r;
}

std::unique_ptr<Runtime> Runtime::connect(const Rendezvous& r, BackendKind backend, std::chrono::milliseconds timeout) {
  set_phase("rendezvous");
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(r.master_port);
  options.isServer = !r.agent_store && r.rank == 0;
  options.numWorkers = r.agent_store ? c10::nullopt : c10::optional<size_t>(r.world_size);
  options.waitWorkers = false;
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store, progress_store;
  try {
    const LibraryLogSilenced quiet;  // the failure below says it in one line
    store = c10::make_intrusive<c10d::TCPStore>(r.master_addr, options);
    // A TCPStore client is not safe to share between threads: the progress publisher gets its own.
    options.isServer = false;
    progress_store = c10::make_intrusive<c10d::TCPStore>(r.master_addr, options);
  } catch (const std::exception& e) {
    note_in_rank_log(e.what());
    throw DistributedError(str_cat("rank ", r.rank, ": cannot reach the rendezvous store at ", r.master_addr, ":",
                                   r.master_port, ": ", one_line_error(e)));
  }
  // Under torchrun's agent store, each restart of the worker group gets its own key space.
  if (const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT"); attempt != nullptr && r.agent_store) {
    store = c10::make_intrusive<c10d::PrefixStore>(str_cat("/worker/attempt_", attempt), store);
    progress_store = c10::make_intrusive<c10d::PrefixStore>(str_cat("/worker/attempt_", attempt), progress_store);
  }
  auto runtime = std::make_unique<Runtime>(r.rank, r.world_size, store, backend, timeout, progress_store);
  runtime->connect_client_ = [r, options]() -> c10::intrusive_ptr<c10d::Store> {
    c10::intrusive_ptr<c10d::Store> client = c10::make_intrusive<c10d::TCPStore>(r.master_addr, options);
    if (const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT"); attempt != nullptr && r.agent_store) {
      client = c10::make_intrusive<c10d::PrefixStore>(str_cat("/worker/attempt_", attempt), client);
    }
    return client;
  };
  return runtime;
}

c10::intrusive_ptr<c10d::Store> Runtime::store_for_another_thread() const {
  return connect_client_ ? connect_client_() : store_;
}

Runtime::Runtime(int rank, int world_size, c10::intrusive_ptr<c10d::Store> store, BackendKind backend,
                 std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> progress_store)
    : rank_(rank),
      world_size_(world_size),
      store_(std::move(store)),
      backend_(backend),
      timeout_(timeout),
      progress_store_(progress_store ? std::move(progress_store) : store_) {
  store_->setTimeout(timeout);
  // Rank r computes on GPU r mod the GPUs seen (its local rank where every host runs one rank a
  // GPU); the current device is per thread, so rank threads each set their own.
  if (const int gpus = cuda_devices(); gpus > 0) use_device(at::Device(at::kCUDA, static_cast<int8_t>(rank % gpus)));
  progress_ = std::make_unique<ProgressPublisher>(progress_store_, rank);
  std::vector<int> all(world_size);
  for (int i = 0; i < world_size; ++i) all[i] = i;
  set_phase("group creation (world)");
  world_ = Group::create("world", all, rank, store_, backend, timeout);
}

std::shared_ptr<Group> Runtime::shared_group(const std::string& name, const std::vector<int>& ranks) const {
  const auto key = std::make_pair(name, ranks);
  if (const auto it = shared_groups_.find(key); it != shared_groups_.end()) return it->second;
  return shared_groups_[key] = new_group(name, ranks);
}

void Runtime::keep_connections_until_exit() {
  progress_.reset();
  static auto* const kept = new std::vector<std::shared_ptr<Group>>;  // never freed: the process ends
  kept->push_back(world_);
  for (const auto& entry : shared_groups_) {
    if (entry.second) kept->push_back(entry.second);
  }
}

void Runtime::record_failure(const RankFailure& failure) {
  if (!progress_) return;  // recorded already, or the rank is ending
  progress_.reset();       // joins the publisher: its store connection is this thread's now
  try {
    write_failure(*progress_store_, failure);
  } catch (const std::exception&) {
    // the store is gone: the launcher judges this rank by its exit status alone
  }
}

std::shared_ptr<Group> Runtime::new_group(const std::string& name, const std::vector<int>& ranks) const {
  const std::string unique = str_cat(name, "#", groups_created_++);
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
  PhaseScope phase(str_cat("group creation (", unique, ")"));
  return Group::create(unique, ranks, rank_, store_, backend_, timeout_);
}

void run_ranks_in_threads(int world_size, const std::function<void(Runtime&)>& fn, std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::mutex mutex;
  // Every rank's failure, in the order they were caught. Each is described on its own thread
  // where it is caught, while its Runtime (and its connections) still lives.
  std::vector<RankFailure> failures;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      const auto failed = [&](RankFailure f) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(std::move(f));
      };
      try {
        Runtime runtime(rank, world_size, store, BackendKind::kGloo, timeout);
        try {
          fn(runtime);
        } catch (const std::exception& e) {
          failed(describe_failure(e, rank));
          return;
        }
      } catch (const std::exception& e) {
        failed(describe_failure(e, rank));  // creating the world group
      } catch (...) {
        failed(describe_failure(std::runtime_error("an unknown exception"), rank));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures.empty()) return;
  const RankFailure* own = first_own_failure(failures);
  RankFailure cause = own != nullptr ? *own : failures.front();
  throw RankFailed(std::move(cause), std::move(failures), world_size);
}

}  // namespace magic::dist
