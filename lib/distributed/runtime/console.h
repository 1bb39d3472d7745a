// Where a program's progress for the person watching goes: stderr, in one process and in every
// rank. A rank the built-in launcher spawned has its stderr in its log, so the launcher hands rank 0
// a copy of its own stderr (MAGIC_CONSOLE_FD) and rank 0's progress reaches the user as it is
// made, on the stream a single process uses; under torchrun or srun a rank's stderr is already theirs.
#pragma once

#include <ostream>

namespace magic::dist {

// The file descriptor of the user's stderr in this process: MAGIC_CONSOLE_FD when the launcher set
// it, else STDERR_FILENO.
int console_fd();

// A stream on console_fd(): std::cerr itself where that is stderr.
std::ostream& console();

}  // namespace magic::dist
