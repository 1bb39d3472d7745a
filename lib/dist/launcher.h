// The built-in launcher (--launch spawn): runs this program's own command line as world_size
// rank processes on loopback, with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR=127.0.0.1, MASTER_PORT) and a TCPStore hosted here (TORCHELASTIC_USE_AGENT_STORE),
// and supervises them:
//  - rank 0's stdout is passed through; every rank's stderr (and the other ranks' stdout) goes
//    to a per-rank log, rank 0's log is copied to stderr at the end;
//  - the first rank to die (a signal, or an exit code other than 0, or 1 from rank 0) is named
//    with its exit status and the tail of its log, the others are stopped (SIGTERM, then
//    SIGKILL), and the command ends with exit code 2;
//  - ranks die with the launcher (PR_SET_PDEATHSIG), so nothing is left behind.
// Each rank writes its pid to $MAGIC_PID_DIR/rank-<r>.pid when that variable is set (tests).
#pragma once

#include <ostream>

namespace magic::dist {

// True inside a rank process (RANK is set: launched by us, torchrun or srun).
bool running_as_rank();

// Returns the exit code for the whole command: rank 0's (0 or 1) when every rank ended
// normally, else 2.
int spawn_ranks(int argc, char** argv, int world_size, std::ostream& log);

// Writes this rank's pid file if MAGIC_PID_DIR is set.
void write_rank_pid_file(int rank);

}  // namespace magic::dist
