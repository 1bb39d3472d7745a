// How magic-check and magic-run become a distributed program: the same command line runs as the
// launcher (--launch spawn: start world_size ranks of this binary on loopback, forked from this
// process where it can, launcher.h) and as each rank (RANK is set, by our launcher, torchrun or
// srun: connect and run the body). --launch threads (magic-check only) runs the ranks as threads
// of this process instead, each with its own Runtime and Gloo groups over an in-memory store: the
// same collectives without a process per rank. It gives up what separate processes give: a rank
// that hangs outside a collective is not stopped (collectives still time out), and a crash takes
// every rank with it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "lib/distributed/runtime/group.h"
#include "lib/distributed/runtime/launcher.h"
#include "lib/distributed/runtime/rank_failure.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/distributed/runtime/topology.h"

namespace magic::dist {

struct RankProgram {
  std::string name = "magic-check";  // how the launcher's messages begin
  std::string launch = "spawn";      // spawn | env | threads
  bool threads_allowed = false;      // whether --launch threads is offered
  TopologySpec topology = TopologySpec::parse("dp=1");
  BackendKind backend = BackendKind::kGloo;
  std::chrono::milliseconds timeout{60000};
  // The tool's main: with it, spawned ranks are forked from the launcher and enter it with RANK
  // set (launcher.h's rank_main), skipping a second load of the binary and LibTorch.
  std::function<int(int, char**)> entry;
  // Where the launcher also copies what it tells the user (a failed rank's lines), so that the
  // tool can put the failure into its reports; null: stderr only.
  std::string* launcher_messages = nullptr;
  // Where a failed run's blamed rank goes (its kind, phase and message: rank_failure.h), so that
  // the tool can tell a failure of the code under test from one of the run; null: nowhere.
  RankFailure* failure = nullptr;
  // Spawned ranks: a line on stderr this often saying where they are (launcher.h); 0: none.
  std::chrono::seconds progress_every{0};

  // Throws InputError for a launch mode other than spawn|env (|threads where allowed), and for
  // a world the built-in launcher does not start (naming --topology and the way out), before
  // anything starts.
  void validate() const;
};

// Whether the ranks run_rank_program starts from here share this process's memory, so that what
// is computed before the call is theirs without computing it again: rank threads (--launch
// threads), or ranks forked from here (--launch spawn with an entry, while this process has no
// other thread). False inside a rank and for --launch env.
bool ranks_share_memory(const RankProgram& program);

// In a rank: one thread for ATen, the pid file, a WORLD_SIZE that matches the topology, the
// connection, then `body`'s exit code; an exception from `body` is recorded for the launcher
// (Runtime::record_failure) and rethrown. In the launcher: spawn the ranks and return the run's
// exit code (launcher.h); --launch threads: run every rank on a thread and return rank 0's code,
// or 2 when a rank failed, named on stderr as the launcher names a rank process (the rank that
// failed first with its own error, then the others); --launch env without RANK is an InputError.
int run_rank_program(const RankProgram& program, int argc, char** argv, const std::function<int(const Runtime&)>& body);

}  // namespace magic::dist
