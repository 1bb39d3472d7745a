#include "lib/dist/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/strings.h"

extern char** environ;

namespace magic::dist {
namespace {

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::string log_path;
  bool done = false;
  int status = 0;
};

volatile sig_atomic_t interrupted = 0;
void on_interrupt(int) {
  interrupted = 1;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return str_cat("was killed by signal ", sig, " (", strsignal(sig), ")");
  }
  return str_cat("exited with code ", WEXITSTATUS(status));
}

std::string tail_of(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "    " + l + "\n";
  return out.empty() ? "    (no output)\n" : out;
}

void signal_all(std::vector<RankProcess>& ranks, int sig) {
  for (auto& r : ranks) {
    if (!r.done) kill(-r.pid, sig);  // the rank's whole process group
  }
}

// Reaps every rank, escalating to SIGKILL after a grace period.
void stop_all(std::vector<RankProcess>& ranks) {
  signal_all(ranks, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (;;) {
    bool any = false;
    for (auto& r : ranks) {
      if (r.done) continue;
      if (waitpid(r.pid, &r.status, WNOHANG) == r.pid) {
        r.done = true;
      } else {
        any = true;
      }
    }
    if (!any) return;
    if (std::chrono::steady_clock::now() > deadline) {
      signal_all(ranks, SIGKILL);
      for (auto& r : ranks) {
        if (!r.done && waitpid(r.pid, &r.status, 0) == r.pid) r.done = true;
      }
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool is_failure(const RankProcess& r) {
  if (WIFSIGNALED(r.status)) return true;
  const int code = WEXITSTATUS(r.status);
  return r.rank == 0 ? code > 1 : code != 0;
}

}  // namespace

bool running_as_rank() {
  const char* rank = std::getenv("RANK");
  return rank != nullptr && *rank != '\0';
}

void write_rank_pid_file(int rank) {
  const char* dir = std::getenv("MAGIC_PID_DIR");
  if (dir == nullptr) return;
  std::ofstream(std::filesystem::path(dir) / str_cat("rank-", rank, ".pid")) << getpid() << "\n";
}

int spawn_ranks(int argc, char** argv, int world_size, std::ostream& log) {
  c10d::TCPStoreOptions store_options;
  store_options.port = 0;  // any free port
  store_options.isServer = true;
  store_options.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  const int port = store->getPort();

  char log_dir_template[] = "/tmp/magic-ranks-XXXXXX";
  if (mkdtemp(log_dir_template) == nullptr) throw DistributedError("launcher: cannot create a log directory in /tmp");
  const std::string log_dir = log_dir_template;

  // Everything the children need is prepared before fork: only async-signal-safe calls after.
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key == "LOCAL_WORLD_SIZE" ||
        key == "MASTER_ADDR" || key == "MASTER_PORT" || key == "TORCHELASTIC_USE_AGENT_STORE") {
      continue;
    }
    base_env.push_back(entry);
  }
  std::vector<char*> child_argv;
  for (int i = 0; i < argc; ++i) child_argv.push_back(argv[i]);
  child_argv.push_back(nullptr);

  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<RankProcess> ranks(world_size);
  for (int r = 0; r < world_size; ++r) {
    ranks[r].rank = r;
    ranks[r].log_path = str_cat(log_dir, "/rank-", r, ".log");
    std::vector<std::string> env = base_env;
    for (const auto& kv : {str_cat("RANK=", r), str_cat("LOCAL_RANK=", r), str_cat("WORLD_SIZE=", world_size),
                           str_cat("LOCAL_WORLD_SIZE=", world_size), std::string("MASTER_ADDR=127.0.0.1"),
                           str_cat("MASTER_PORT=", port), std::string("TORCHELASTIC_USE_AGENT_STORE=True")}) {
      env.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int log_fd = open(ranks[r].log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      stop_all(ranks);
      throw DistributedError(str_cat("launcher: fork failed for rank ", r, ": ", std::strerror(errno)));
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      if (log_fd >= 0) {
        dup2(log_fd, STDERR_FILENO);
        if (r != 0) dup2(log_fd, STDOUT_FILENO);
      }
      execve("/proc/self/exe", child_argv.data(), envp.data());
      _exit(127);
    }
    setpgid(pid, pid);
    if (log_fd >= 0) close(log_fd);
    ranks[r].pid = pid;
  }

  int exit_code = 0;
  int remaining = world_size;
  const RankProcess* failed = nullptr;
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR && interrupted) {
        log << "magic-check: interrupted; stopping " << remaining << " ranks\n";
        stop_all(ranks);
        exit_code = kExitBadInput;
        break;
      }
      if (errno == EINTR) continue;
      break;
    }
    for (auto& r : ranks) {
      if (r.pid != pid || r.done) continue;
      r.done = true;
      r.status = status;
      --remaining;
      if (is_failure(r)) {
        failed = &r;
      } else if (r.rank == 0) {
        exit_code = WEXITSTATUS(status);
      }
    }
    if (failed != nullptr) {
      stop_all(ranks);
      break;
    }
  }
  if (failed != nullptr) {
    log << "magic-check: rank " << failed->rank << " of " << world_size << " (pid " << failed->pid << ") "
        << describe_status(failed->status) << "; stopped the other ranks.\n"
        << "  last lines of rank " << failed->rank << "'s output:\n"
        << tail_of(failed->log_path, 15);
    exit_code = kExitBadInput;
  } else {
    std::ifstream rank0(ranks[0].log_path);
    log << rank0.rdbuf();
  }
  std::error_code ec;
  std::filesystem::remove_all(log_dir, ec);
  return exit_code;
}

}  // namespace magic::dist
