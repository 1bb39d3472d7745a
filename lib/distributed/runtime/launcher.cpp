#include "lib/distributed/runtime/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "lib/core/error.h"
#include "lib/core/ignored_sigpipe.h"
#include "lib/core/process_exit.h"
#include "lib/core/scratch_folder.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

extern char** environ;

namespace magic::dist {
namespace {

using Clock = std::chrono::steady_clock;

// How long the launcher waits for the ranks' progress once the run has failed.
constexpr std::chrono::milliseconds kProgressReadLimit{1000};
// How long a failure that may be a consequence waits for the death that caused it (settle()).
constexpr std::chrono::milliseconds kSettle{300};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::string log_path;
  bool done = false;  // exited, or its status is lost
  bool lost = false;  // waitpid could not report its status
  int status = 0;     // the wait status, once done
  bool stopped = false;
  int stop_signal = 0;
  Clock::time_point stopped_since;
};

// Set by the handler, read by the thread that runs the launcher, which need not be the one the
// signal interrupts: a lock-free atomic, which is both signal-safe and ordered across threads
// (ThreadSanitizer named a volatile sig_atomic_t here as a race).
std::atomic<int> interrupted{0};
static_assert(std::atomic<int>::is_always_lock_free);
void on_interrupt(int sig) {
  interrupted.store(sig);
}

// For the launcher's lifetime: SIGINT and SIGTERM stop the ranks, and SIGCHLD has its default
// disposition (a parent that ignores SIGCHLD has its children reaped by the kernel, and waitpid
// can no longer report their status). The dispositions found are restored at the end.
class SignalDispositions {
 public:
  SignalDispositions() {
    interrupted = 0;
    struct sigaction handler {};
    handler.sa_handler = on_interrupt;
    sigemptyset(&handler.sa_mask);
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) {
      sigaction(kSignals[i], kSignals[i] == SIGCHLD ? &fallback : &handler, &saved_[i]);
    }
  }
  ~SignalDispositions() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
  }
  SignalDispositions(const SignalDispositions&) = delete;
  SignalDispositions& operator=(const SignalDispositions&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};
  std::array<struct sigaction, 3> saved_{};
};

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return str_cat("signal ", sig, abbrev != nullptr ? str_cat(" (SIG", abbrev, ")") : "");
}

std::string describe_status(const RankProcess& r) {
  if (r.lost) return "ended with a status that could not be read";
  if (WIFSIGNALED(r.status)) return "was killed by " + signal_name(WTERMSIG(r.status));
  const int code = WEXITSTATUS(r.status);
  return str_cat("exited with code ", code, code == 127 ? " (the program could not be executed)" : "");
}

bool is_failure(const RankProcess& r) {
  if (r.lost || WIFSIGNALED(r.status)) return true;
  const int code = WEXITSTATUS(r.status);
  return r.rank == 0 ? code > 1 : code != 0;
}

bool is_frame(const std::string& line) {
  return line.find("frame #") != std::string::npos || line.find("Exception raised from") != std::string::npos;
}

// The rank's own one-line account of its failure: the last line of its log that begins with
// "<name>: rank <r>: " (how the rank's main() reports errors), or "".
std::string error_line(const std::string& log_path, const std::string& name, int rank) {
  const std::string prefix = str_cat(name, ": rank ", rank, ": ");
  std::ifstream in(log_path);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0 && !is_frame(line)) found = line.substr(prefix.size());
  }
  if (found.size() > 400) found = found.substr(0, 400) + "...";
  return found;
}

// Killed by a signal other than SIGPIPE: a death of its own. SIGPIPE kills a rank that wrote to a
// connection a dead peer had closed, a consequence of that peer's death.
bool died_of_its_own_signal(const RankProcess& r) {
  return r.done && !r.lost && WIFSIGNALED(r.status) && WTERMSIG(r.status) != SIGPIPE;
}

// A signal the process raises on itself when its code goes wrong (a bad address, an abort, a
// division by zero), rather than one sent from outside (SIGKILL, SIGTERM, ...).
bool is_crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT;
}

// Reads every status change of the live ranks without blocking; remembers the first failure.
void collect_statuses(std::vector<RankProcess>& ranks, RankProcess*& first_failure) {
  for (auto& r : ranks) {
    while (!r.done) {
      int status = 0;
      const pid_t pid = waitpid(r.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (pid == 0) break;
      if (pid < 0) {
        if (errno == EINTR) continue;
        r.done = r.lost = true;  // reaped by someone else (ECHILD): its status is unknown
      } else if (WIFSTOPPED(status)) {
        if (!r.stopped) r.stopped_since = Clock::now();
        r.stopped = true;
        r.stop_signal = WSTOPSIG(status);
        continue;
      } else if (WIFCONTINUED(status)) {
        r.stopped = false;
        continue;
      } else {
        r.done = true;
        r.status = status;
      }
      r.stopped = false;
      if (first_failure == nullptr && is_failure(r)) first_failure = &r;
    }
  }
}

// A failure may be the consequence of a peer's death that the last poll did not yet see: a peer
// closes its connections before its status can be read, and a rank writing to one dies of
// SIGPIPE (or one waiting gives up) in between. A short wait lets that death be seen too.
void settle(std::vector<RankProcess>& ranks, RankProcess*& first_failure) {
  if (first_failure == nullptr || died_of_its_own_signal(*first_failure)) return;
  const auto deadline = Clock::now() + kSettle;
  while (Clock::now() < deadline) {
    collect_statuses(ranks, first_failure);
    if (std::any_of(ranks.begin(), ranks.end(), died_of_its_own_signal)) return;
    if (std::all_of(ranks.begin(), ranks.end(), [](const RankProcess& r) { return r.done; })) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Ends every live rank: SIGTERM (with SIGCONT, so that a stopped rank acts on it), then SIGKILL
// after a grace period. Signals go to the rank's process group, which holds anything it started.
void stop_all(std::vector<RankProcess>& ranks) {
  RankProcess* unused = nullptr;
  for (auto& r : ranks) {
    if (r.done) continue;
    kill(-r.pid, SIGTERM);
    kill(-r.pid, SIGCONT);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  for (;;) {
    collect_statuses(ranks, unused);
    if (std::none_of(ranks.begin(), ranks.end(), [](const RankProcess& r) { return !r.done; })) return;
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& r : ranks) {
    if (r.done) continue;
    kill(-r.pid, SIGKILL);
    while (waitpid(r.pid, &r.status, 0) < 0 && errno == EINTR) {
    }
    r.done = true;
  }
}

// What the launcher reads of a rank once the run has failed: its progress and, if it recorded
// one, its failure (rank_failure.h), whose phase and wait are then its progress.
struct RankState {
  RankProgress progress;
  std::optional<RankFailure> failure;
};

std::string phase_of(const RankProgress& p) {
  return str_cat("in phase '", p.known ? p.phase : std::string("unknown"), "'");
}

std::string doing(const RankProgress& p) {
  return p.waiting.empty() ? phase_of(p) : str_cat("waiting in ", p.waiting, " ", phase_of(p));
}

// Who failed first on its own, and how, judged before the live ranks are stopped. `failure`
// is that rank's record when it left one.
struct Verdict {
  const RankProcess* rank = nullptr;
  std::string what;
  const RankFailure* failure = nullptr;
};

// Of the ranks that recorded a failure of their own, the first to fail (rank_failure.h); a rank
// that ended normally all the same (its tool handled the error) is not one.
const RankFailure* first_own_record(const std::vector<RankProcess>& ranks, const std::vector<RankState>& states) {
  std::vector<RankFailure> own;
  for (const auto& s : states) {
    if (!s.failure || !s.failure->own) continue;
    const RankProcess& r = ranks[s.failure->rank];
    if (!r.done || is_failure(r)) own.push_back(*s.failure);
  }
  const RankFailure* first = first_own_failure(own);
  return first == nullptr ? nullptr : &*states[first->rank].failure;
}

Verdict judge(const std::vector<RankProcess>& ranks, const RankProcess* first_failure,
              const std::vector<RankState>& states, std::chrono::milliseconds timeout) {
  const auto seconds = format_number(std::chrono::duration<double>(timeout).count());
  if (first_failure != nullptr && died_of_its_own_signal(*first_failure)) {
    return {first_failure, describe_status(*first_failure)};
  }
  // A rank that raised an error of its own comes before those that failed waiting for it, in
  // whatever order their exits were seen: its record was written before its connections closed.
  if (const RankFailure* own = first_own_record(ranks, states)) {
    return {&ranks[own->rank], "failed with its own error", own};
  }
  if (first_failure != nullptr && !first_failure->lost && WIFSIGNALED(first_failure->status)) {
    for (const auto& r : ranks) {
      if (died_of_its_own_signal(r)) return {&r, describe_status(r)};
    }
    return {first_failure, describe_status(*first_failure)};
  }
  const RankProcess* stopped = nullptr;
  for (const auto& r : ranks) {
    if (r.stopped && (stopped == nullptr || r.stopped_since < stopped->stopped_since)) stopped = &r;
  }
  if (stopped != nullptr) {
    const bool past_timeout = Clock::now() - stopped->stopped_since >= timeout;
    return {stopped, str_cat("was stopped by ", signal_name(stopped->stop_signal),
                             past_timeout ? str_cat(" and did not resume within ", seconds, " s") : "")};
  }
  if (first_failure == nullptr || first_failure->lost) return {};
  const RankState& first = states[first_failure->rank];
  const std::string& waited = first.progress.waiting;
  // A rank that failed while waiting in a collective (or, by its record, because of a peer)
  // waited for someone: a rank killed by a signal (its death seen in the same poll as the
  // waiter's exit), else a live rank that is not waiting (in a loop, or a deadlock outside our
  // collectives), is the one that stopped.
  if (!waited.empty() || (first.failure && !first.failure->own)) {
    for (const auto& r : ranks) {
      if (died_of_its_own_signal(r)) return {&r, describe_status(r)};
    }
  }
  if (!waited.empty()) {
    for (const auto& r : ranks) {
      if (!r.done && states[r.rank].progress.waiting.empty()) {
        return {&r, str_cat("stopped making progress (not waiting in any collective while rank ", first_failure->rank,
                            " gave up waiting in ", waited, ")")};
      }
    }
  }
  return {first_failure, describe_status(*first_failure) + (waited.empty() ? "" : " after waiting in " + waited),
          first.failure ? &*first.failure : nullptr};
}

// The verdict as the tool's RankFailure: the rank's own record, else what the launcher saw.
RankFailure blamed(const Verdict& v, const std::vector<RankState>& states) {
  if (v.failure != nullptr) return *v.failure;
  const RankProcess& r = *v.rank;
  const RankProgress& p = states[r.rank].progress;
  RankFailure f;
  f.rank = r.rank;
  f.phase = p.known ? p.phase : "";
  f.waiting = p.waiting;
  f.message = v.what;
  const bool signaled = r.done && !r.lost && WIFSIGNALED(r.status);
  if (signaled) {
    f.kind = is_crash_signal(WTERMSIG(r.status)) ? "crashed" : "killed";
    f.own = died_of_its_own_signal(r);
  } else {
    f.kind = r.stopped ? "stopped" : r.done ? "exited" : "stalled";
    f.own = !r.done;
  }
  return f;
}

// TCPStore's server reads each request to its end on its one thread: a rank stopped halfway
// through sending one blocks every other client, and a store read (check() has no timeout) with
// it, until that rank dies. So the reads run on a thread of their own, given `limit`; a read
// still blocked then finishes once stop_all() has killed the rank, and the thread holds the
// store until it does.
std::optional<std::vector<RankState>> read_states_within(c10::intrusive_ptr<c10d::Store> store, int world_size,
                                                         std::chrono::milliseconds limit) {
  auto promise = std::make_shared<std::promise<std::vector<RankState>>>();
  std::future<std::vector<RankState>> result = promise->get_future();
  std::thread([store, world_size, promise] {
    std::vector<RankState> states(world_size);
    for (int r = 0; r < world_size; ++r) {
      try {
        states[r].progress = read_progress(*store, r);
        states[r].failure = read_failure(*store, r);
      } catch (const std::exception&) {
        // unknown: judged by its exit status
      }
      if (const auto& f = states[r].failure) states[r].progress = {true, f->phase, f->waiting};
    }
    promise->set_value(std::move(states));
  }).detach();
  if (result.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return result.get();
}

// "magic-check: after 60 s: rank 0 in phase 'REPLAY product at step 37'; ranks 1, 2 waiting in
// all_reduce on group 'world' in phase 'REPLAY product at step 37'"
void report_progress(std::ostream& out, const std::string& name, c10::intrusive_ptr<c10d::Store> store, int world_size,
                     Clock::duration elapsed) {
  const std::optional<std::vector<RankState>> read = read_states_within(store, world_size, kProgressReadLimit);
  if (!read) return;  // the failure path says why, if it comes to that
  std::map<std::string, std::vector<std::string>> by_state;
  for (int r = 0; r < world_size; ++r) by_state[doing((*read)[r].progress)].push_back(std::to_string(r));
  std::vector<std::string> parts;
  for (const auto& [state, members] : by_state) {
    parts.push_back(str_cat("rank", members.size() > 1 ? "s " : " ", join(members, ", "), " ", state));
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(elapsed).count();
  out << name << ": after " << seconds << " s: " << join(parts, "; ") << std::endl;
}

// A forked rank: waits for the store's port, takes the rank's variables (as an exec'd rank gets
// them in its environment), enters the program and exits with its code. Never returns into the
// launcher's stack: an exception is a failed rank.
[[noreturn]] void run_forked_rank(int port_fd, const std::vector<std::string>& dropped_keys,
                                  const std::vector<std::string>& vars, const std::function<int()>& rank_main) {
  std::string port;
  char buffer[16];
  for (ssize_t n; (n = read(port_fd, buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) std::_Exit(kExitBadInput);
    port.append(buffer, static_cast<size_t>(n));
  }
  close(port_fd);
  if (port.empty()) std::_Exit(kExitBadInput);  // the launcher could not start the store
  for (const auto& key : dropped_keys) unsetenv(key.c_str());
  for (const auto& kv : vars) {
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    setenv(key.c_str(), key == "MASTER_PORT" ? port.c_str() : kv.c_str() + eq + 1, 1);
  }
  int code = kExitBadInput;
  try {
    code = rank_main();
  } catch (const std::exception& e) {
    std::cerr << "rank failed: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << "rank failed with an unknown exception" << std::endl;
  }
  // The rank's own objects are gone with rank_main's scope; the static destructors would copy
  // each dispatcher page this process shares with the launcher (~0.3 s per rank).
  exit_without_static_destructors(code, LeakCheck::kSkipInForkedRank);
}

}  // namespace

bool single_threaded_process() {
  std::error_code ec;
  int threads = 0;  // /proc/self/task lists one entry per thread
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++threads;
  }
  // ThreadSanitizer keeps a thread of its own from the first thread a process starts (and starts
  // it again in a forked child), so a TSan build's single-threaded process lists two: any thread
  // of ours beside it makes three.
#if defined(__SANITIZE_THREAD__)
  constexpr int kSanitizerThreads = 1;
#else
  constexpr int kSanitizerThreads = 0;
#endif
  return !ec && threads <= 1 + kSanitizerThreads;
}

bool running_as_rank() {
  const char* rank = std::getenv("RANK");
  return rank != nullptr && *rank != '\0';
}

void write_rank_pid_file(int rank) {
  const char* dir = std::getenv("MAGIC_PID_DIR");
  if (dir == nullptr) return;
  std::ofstream(std::filesystem::path(dir) / str_cat("rank-", rank, ".pid")) << getpid() << "\n";
}

int spawn_ranks(const SpawnOptions& options, std::ostream& log) {
  const int64_t world_size = options.world_size;
  if (world_size < 1 || world_size > kMaxSpawnedRanks) {
    throw InputError(str_cat("the built-in launcher starts 1 to ", kMaxSpawnedRanks, " ranks on this machine; ",
                             world_size, " requested (run larger worlds under torchrun or srun with --launch env)"));
  }
  const std::string& name = options.name;
  SignalDispositions signals;
  // The per-rank logs: removed at the end unless kept (a rank failed).
  ScratchFolder logs("magic-ranks", options.log_root);
  if (logs.path().empty()) throw DistributedError("launcher: log directory: " + logs.error());

  // Ranks forked from this process (options.rank_main) skip loading the binary and LibTorch again
  // (~0.6 s of CPU each). Only a process with no other thread forks safely without exec (a
  // lock another thread held stays held in the child), so they are forked before the store (its
  // server is a thread) and read its port from a pipe; with any thread here, every rank execs.
  const bool forked = options.rank_main && single_threaded_process();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);  // else the children would write what is buffered here a second time

  // Everything the children need is prepared before fork: only async-signal-safe calls after
  // (forked ranks: after their port arrives, and with no other thread to hold a lock).
  std::vector<std::string> base_env;
  std::vector<std::string> dropped_keys;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key == "LOCAL_WORLD_SIZE" ||
        key == "MASTER_ADDR" || key == "MASTER_PORT" || key == "TORCHELASTIC_USE_AGENT_STORE" ||
        key == "TORCHELASTIC_RESTART_COUNT" || key == "MAGIC_RANK_LOG" || key == "MAGIC_CONSOLE_FD") {
      dropped_keys.push_back(key);
      continue;
    }
    base_env.push_back(entry);
  }
  std::vector<std::string> argv_storage = options.argv;
  std::vector<char*> child_argv;
  for (auto& a : argv_storage) child_argv.push_back(a.data());
  child_argv.push_back(nullptr);

  c10::intrusive_ptr<c10d::TCPStore> store;
  int port = 0;
  const auto start_store = [&] {
    c10d::TCPStoreOptions store_options;
    store_options.port = 0;  // any free port
    store_options.isServer = true;
    store_options.waitWorkers = false;
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
    port = store->getPort();
    for (int r = 0; r < world_size; ++r) write_progress(*store, r, {true, "startup", ""});
  };
  if (!forked) start_store();

  // Rank 0's copy of our stderr, for its progress (console.h); every other rank closes it.
  struct Descriptor {
    int fd;
    ~Descriptor() {
      if (fd >= 0) close(fd);
    }
  };
  const Descriptor console{fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)};
  const int console_fd = console.fd;

  std::vector<RankProcess> ranks(world_size);
  std::vector<int> port_pipes;  // forked ranks: the write end of each rank's pipe
  const auto give_up = [&](const std::string& what) {
    for (int fd : port_pipes) close(fd);
    // Only the ranks started so far: a pid of -1 would signal process 1 and wait for any child.
    ranks.erase(std::remove_if(ranks.begin(), ranks.end(), [](const RankProcess& r) { return r.pid <= 0; }),
                ranks.end());
    stop_all(ranks);
    throw DistributedError(what);
  };
  for (int r = 0; r < world_size; ++r) {
    ranks[r].rank = r;
    ranks[r].log_path = str_cat(logs.path(), "/rank-", r, ".log");
    std::vector<std::string> rank_vars = {
        str_cat("RANK=", r),
        str_cat("LOCAL_RANK=", r),
        str_cat("WORLD_SIZE=", world_size),
        str_cat("LOCAL_WORLD_SIZE=", world_size),
        std::string("MASTER_ADDR=127.0.0.1"),
        str_cat("MASTER_PORT=", port),  // forked ranks: replaced by the port read from the pipe
        std::string("TORCHELASTIC_USE_AGENT_STORE=True"),
        str_cat("MAGIC_RANK_LOG=", ranks[r].log_path)};
    if (r == 0 && console_fd >= 0) rank_vars.push_back(str_cat("MAGIC_CONSOLE_FD=", console_fd));
    std::vector<std::string> env = base_env;
    env.insert(env.end(), rank_vars.begin(), rank_vars.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string exec_failed = str_cat(name, ": rank ", r, ": cannot execute ", options.program, "\n");
    const int log_fd = open(ranks[r].log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) give_up(str_cat("launcher: cannot create ", ranks[r].log_path, ": ", std::strerror(errno)));
    int port_pipe[2] = {-1, -1};
    if (forked && pipe2(port_pipe, O_CLOEXEC) != 0) {
      const int error = errno;
      close(log_fd);
      give_up(str_cat("launcher: cannot create a pipe for rank ", r, ": ", std::strerror(error)));
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      const int error = errno;
      close(log_fd);
      if (forked) {
        close(port_pipe[0]);
        close(port_pipe[1]);
      }
      give_up(str_cat("launcher: fork failed for rank ", r, ": ", std::strerror(error)));
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      // Dispositions ignored by whoever started us (SIG_IGN survives exec) and our blocked
      // signals must not reach the rank.
      struct sigaction fallback {};
      fallback.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &fallback, nullptr);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(log_fd, STDERR_FILENO);
      if (r != 0) dup2(log_fd, STDOUT_FILENO);
      if (console_fd >= 0) {
        if (r == 0) {
          fcntl(console_fd, F_SETFD, 0);  // kept across exec
        } else {
          close(console_fd);
        }
      }
      if (forked) {
        close(log_fd);
        for (int fd : port_pipes) close(fd);
        close(port_pipe[1]);
        run_forked_rank(port_pipe[0], dropped_keys, rank_vars, options.rank_main);
      }
      execve(options.program.c_str(), child_argv.data(), envp.data());
      [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      _exit(127);
    }
    setpgid(pid, pid);
    close(log_fd);
    ranks[r].pid = pid;
    if (forked) {
      close(port_pipe[0]);
      port_pipes.push_back(port_pipe[1]);
    }
  }
  if (forked) {
    try {
      start_store();
    } catch (const std::exception& e) {
      give_up(str_cat("launcher: cannot start the store: ", e.what()));
    }
    {
      // A rank already dead has closed its pipe: EPIPE, not SIGPIPE (the supervision below names it).
      const IgnoredSigpipe ignored_sigpipe;
      const std::string text = std::to_string(port);
      for (int fd : port_pipes) {
        [[maybe_unused]] const ssize_t written = write(fd, text.data(), text.size());
        close(fd);
      }
    }
    port_pipes.clear();
  }

  // Supervise: a failure, a rank stopped past the timeout, an unreadable status or an interrupt
  // ends the run; polling (rather than a blocking waitpid) notices each within a tick.
  RankProcess* first_failure = nullptr;
  const auto supervised_since = Clock::now();
  auto next_progress = supervised_since + options.progress_every;
  for (;;) {
    if (options.progress != nullptr && options.progress_every.count() > 0 && Clock::now() >= next_progress) {
      next_progress += options.progress_every;
      report_progress(*options.progress, name, store, world_size, Clock::now() - supervised_since);
    }
    collect_statuses(ranks, first_failure);
    const bool lost = std::any_of(ranks.begin(), ranks.end(), [](const RankProcess& r) { return r.lost; });
    const bool stalled = std::any_of(ranks.begin(), ranks.end(), [&](const RankProcess& r) {
      return r.stopped && Clock::now() - r.stopped_since >= options.timeout;
    });
    if (interrupted || lost || stalled || first_failure != nullptr) break;
    if (std::all_of(ranks.begin(), ranks.end(), [](const RankProcess& r) { return r.done; })) {
      // Every rank ended normally: rank 0's code is the verdict, its log the launcher's stderr.
      std::ifstream rank0(ranks[0].log_path);
      for (std::string line; std::getline(rank0, line);) {
        if (!is_frame(line)) log << line << "\n";
      }
      return WEXITSTATUS(ranks[0].status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  if (!interrupted) settle(ranks, first_failure);
  // Judge before stopping anyone: afterwards every live rank looks killed.
  const std::optional<std::vector<RankState>> read = read_states_within(store, world_size, kProgressReadLimit);
  const std::vector<RankState> states = read.value_or(std::vector<RankState>(world_size));
  const std::vector<RankProcess> before = ranks;
  const Verdict verdict = judge(before, first_failure, states, options.timeout);
  stop_all(ranks);
  logs.keep();

  const std::string prefix = name + ": ";
  if (interrupted) {
    log << prefix << "interrupted by " << signal_name(interrupted.load()) << "\n";
  }
  if (!read) {
    log << prefix << "the store did not answer within " << format_number(kProgressReadLimit.count() / 1000.0)
        << " s (a rank stopped halfway through a store request blocks it), so the ranks' phases are unknown\n";
  }
  std::vector<int> unreadable;
  for (const auto& r : before) {
    if (r.lost) unreadable.push_back(r.rank);
  }
  if (!unreadable.empty()) {
    std::vector<std::string> shown;
    for (int r : unreadable) shown.push_back(std::to_string(r));
    log << prefix << "could not learn the exit status of rank" << (shown.size() > 1 ? "s " : " ") << join(shown, ", ")
        << " (was it reaped by another process?); treating the run as failed\n";
  }
  if (verdict.rank != nullptr) {
    const RankProcess& r = *verdict.rank;
    // Its own account: the record's, else the last error line of its log.
    const std::string own = verdict.failure != nullptr ? verdict.failure->kind + ": " + verdict.failure->message
                            : r.done                   ? error_line(r.log_path, name, r.rank)
                                                       : "";
    log << prefix << "rank " << r.rank << " of " << world_size << " (pid " << r.pid << ") " << verdict.what << " "
        << phase_of(states[r.rank].progress) << (own.empty() ? "" : ": " + own) << "; its log: " << r.log_path << "\n";
    if (options.failure != nullptr && !interrupted) {
      *options.failure = blamed(verdict, states);
      if (verdict.failure == nullptr && !own.empty()) options.failure->message += ": " + own;
    }
  }
  // One line per state, listing the ranks in it: where the others were when the run was stopped.
  std::map<std::string, std::vector<std::string>> others;
  for (const auto& r : before) {
    if (verdict.rank != nullptr && r.rank == verdict.rank->rank) continue;
    const RankProgress& progress = states[r.rank].progress;
    std::string state;
    if (r.lost) {
      state = "status unknown";
    } else if (r.done && !is_failure(r)) {
      state = str_cat("finished (exit code ", WEXITSTATUS(r.status), ")");
    } else if (r.done) {
      state = str_cat(describe_status(r), progress.waiting.empty() ? "" : " after", " ", doing(progress));
      // Another error of its own (rare: two ranks raising) is worth its message; a consequence's
      // message names its own rank and only repeats what the first line says.
      if (const auto& f = states[r.rank].failure; f && f->own) state += str_cat(": ", f->kind, ": ", f->message);
    } else if (r.stopped) {
      state = str_cat("stopped by ", signal_name(r.stop_signal), " ", phase_of(progress));
    } else {
      state = doing(progress);
    }
    others[state].push_back(std::to_string(r.rank));
  }
  for (const auto& [state, members] : others) {
    log << prefix << "  rank" << (members.size() > 1 ? "s " : " ") << join(members, ", ") << ": " << state << "\n";
  }
  log << prefix << "stopped the remaining ranks; logs of every rank: " << logs.path() << "/\n";
  return kExitBadInput;
}

}  // namespace magic::dist
