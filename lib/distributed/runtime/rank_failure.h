// A rank's account of how it failed, so that a failed run is blamed on the rank that failed first
// with an error of its own, not on one that failed waiting for it (a bystander). A rank makes it
// on its own thread where the exception is caught (phase and wait are per thread), while its
// connections are still open: a peer that fails because this rank is gone fails after the record
// was written. Spawned ranks leave it in the store for the launcher (launcher.h); rank threads
// (--launch threads) hand it to run_ranks_in_threads, which throws RankFailed.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/error.h"

namespace magic::dist {

struct RankFailure {
  int rank = -1;  // -1: no rank is named
  // An error of its own: not a wait in a collective or receive that failed, and not a
  // DistributedError (a peer lost, a timeout), which are the consequences of another's failure.
  bool own = false;
  // The word the tools print before the message: from a rank's exception "failed" (the code under
  // test raised), "error" (bad input), "interrupted", "distributed failure"; named by the launcher
  // without a record "crashed" (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), "killed" (any other
  // signal), "stopped" (SIGSTOP past the timeout), "stalled", "exited" (an exit code alone).
  std::string kind;
  std::string phase;    // where it failed ("step gradients at step 0")
  std::string waiting;  // the wait it failed in ("all_reduce on group 'world'"), or ""
  std::string message;  // one line, without a backtrace
  int64_t time_us = 0;  // system_clock: comparable between the processes of one machine
};

// The failure `e` of this thread's rank, with its phase and wait; call it where `e` is caught.
RankFailure describe_failure(const std::exception& e, int rank);

// Whether the code under test failed, rather than the run: an error of its own that is not bad
// input or an interrupt ("failed"), or a crash signal ("crashed"). magic-check exits 1 for these.
bool fails_the_check(const RankFailure& failure);

// The rank to blame among `failures`: the earliest one of its own; null when none is.
const RankFailure* first_own_failure(const std::vector<RankFailure>& failures);

// The record in the store, one key per rank (best effort: a rank that cannot write it is judged
// without it). read_failure does not block: no record reads as nullopt.
std::string failure_key(int rank);
void write_failure(c10d::Store& store, const RankFailure& failure);
std::optional<RankFailure> read_failure(c10d::Store& store, int rank);

// The failure of a run of rank threads: the rank that failed first with its own error (else the
// first to fail), and every rank's failure in the order they happened.
class RankFailed : public DistributedError {
 public:
  RankFailed(RankFailure cause, std::vector<RankFailure> all, int world_size);
  const RankFailure& cause() const { return cause_; }
  const std::vector<RankFailure>& all() const { return all_; }
  int world_size() const { return world_size_; }

 private:
  RankFailure cause_;
  std::vector<RankFailure> all_;
  int world_size_;
};

}  // namespace magic::dist
