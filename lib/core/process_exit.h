// How the tools end their process.
#pragma once

namespace magic {

// Whether a process that ends without its static destructors looks for leaks first. _Exit skips
// LeakSanitizer's check at exit, so under ASan a tool's process checks here; a forked rank does
// not, since LibTorch's fork handler leaks its thread pool in every child by design, and the rank
// code it runs is checked where ranks run as threads.
enum class LeakCheck { kRun, kSkipInForkedRank };

// Flushes the standard streams and ends the process with `code`, skipping static destructors:
// LibTorch's unregister each of its thousands of operators, writing to every page of the
// dispatcher tables. In a launcher whose pages its forked ranks shared copy-on-write, each write
// faults (0.25 s of the 2.4 s magic-check on n_ci=4,n_per_block=2); in a forked rank each copies a
// page. For the end of main and of a forked rank, once every file the program wrote is closed.
[[noreturn]] void exit_without_static_destructors(int code, LeakCheck leaks = LeakCheck::kRun);

}  // namespace magic
