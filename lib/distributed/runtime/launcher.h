// The built-in launcher (--launch spawn): runs a command line as world_size rank processes on
// loopback, with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1,
// MASTER_PORT) and a TCPStore hosted here (TORCHELASTIC_USE_AGENT_STORE), and supervises them:
//  - ranks are forked from this process and enter the program's main (rank_main) when it has no
//    other thread, else they execute the program (see SpawnOptions::rank_main);
//  - rank 0's stdout is passed through; every rank's stderr (and the other ranks' stdout) goes
//    to a per-rank log (MAGIC_RANK_LOG tells the rank its path); rank 0's log is copied to the
//    launcher's log stream at the end of a run in which no rank failed; rank 0 also gets a copy
//    of the launcher's stderr (MAGIC_CONSOLE_FD, console.h) for the progress a person watches;
//  - signal dispositions inherited from whoever started us (an ignored SIGCHLD, SIGINT, SIGPIPE)
//    are reset, so that rank statuses can be read and ranks behave as if started from a shell;
//  - a rank that dies (a signal, an exit code other than 0, or above 1 from rank 0), or stays
//    stopped (SIGSTOP) longer than the timeout, ends the run: the launcher names the rank that
//    failed first on its own (its failure record says so: rank_failure.h; a rank killed by
//    SIGPIPE, or one that gave up waiting, points at the peer whose failure caused it), its last
//    phase (progress.h) and where the others were, one line each; stops the others (SIGTERM,
//    then SIGKILL); keeps the logs and prints their paths;
//  - ranks die with the launcher (PR_SET_PDEATHSIG), so nothing is left behind.
// Each rank writes its pid to $MAGIC_PID_DIR/rank-<r>.pid when that variable is set (tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "lib/distributed/runtime/rank_failure.h"

namespace magic::dist {

// The most ranks the built-in launcher starts on one machine (each is a whole LibTorch process
// with a Gloo connection to every other rank); larger worlds run under torchrun or srun
// (--launch env).
constexpr int64_t kMaxSpawnedRanks = 64;

struct SpawnOptions {
  std::string program = "/proc/self/exe";  // what every rank executes
  std::vector<std::string> argv;           // its command line (argv[0] included)
  int64_t world_size = 1;
  // How long a rank may stay stopped before the run is declared stuck: the collectives' timeout.
  std::chrono::milliseconds timeout{60000};
  std::string name = "magic-check";  // how the launcher's messages begin
  std::string log_root;              // where the per-rank log directory goes ($TMPDIR or /tmp)
  // The program's own entry (its main, which reads RANK and the rest from the environment): when
  // set, ranks are forked from this process and enter it, instead of executing `program`, if
  // this process has no other thread (else they execute `program`, which must be this binary).
  std::function<int()> rank_main;
  // While the ranks run, a line to `progress` this often saying where they are (their phases, as
  // a failure's lines name them), so that a long run is seen to move; 0 or null: none.
  std::chrono::seconds progress_every{0};
  std::ostream* progress = nullptr;
  // Where a failed run's blamed rank goes: its own record, or what the launcher saw ("crashed",
  // "killed", "stopped", "stalled", "exited"), with its phase; untouched when no rank is named.
  RankFailure* failure = nullptr;
};

// True inside a rank process (RANK is set: launched by us, torchrun or srun).
bool running_as_rank();

// Whether this process has no thread but the calling one (then spawn_ranks forks its ranks).
bool single_threaded_process();

// Returns the exit code for the whole command: rank 0's (0 or 1) when every rank ended
// normally, else 2 (a rank failed or stalled, a status could not be read, or we were
// interrupted); whether a failure is one of the code under test (options.failure,
// fails_the_check) is the tool's to decide. Throws InputError, before starting anything, for a world size outside
// 1..kMaxSpawnedRanks; DistributedError when it cannot start the ranks.
int spawn_ranks(const SpawnOptions& options, std::ostream& log);

// Writes this rank's pid file if MAGIC_PID_DIR is set.
void write_rank_pid_file(int rank);

}  // namespace magic::dist
