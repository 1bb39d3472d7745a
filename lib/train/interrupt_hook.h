// Fault injection for the resume tests: MAGIC_INTERRUPT_AT="training:T" or "replay:T", with an
// optional ":rank=R", makes the process kill itself with SIGKILL (as the OOM killer or a lost
// node would: no handler, no cleanup) right after training step T, or after the T-th REPLAY step
// this process takes (counted over all queries). Unset in normal use; a malformed value is an
// InputError.
#pragma once

#include <cstdint>

namespace magic {

enum class RunPhase { kTraining, kReplay };

// `step`: the training step just taken (REPLAY steps are counted here).
void interrupt_if_asked(RunPhase phase, int64_t step);

}  // namespace magic
