// Progress of a rank, so that a rank that stops making progress can be named. Each rank has a
// phase ("rendezvous", "training step 3", "REPLAY step 1", ...) and, while a blocking collective
// or receive waits, what it waits in. Both are per thread, since tests run ranks as threads of one
// process. A Runtime attaches a ProgressPublisher: a background thread that writes the rank's
// state to the store when it changes (at once for a phase change, at most every 100 ms for waits),
// so a collective costs no store traffic. The launcher reads the states to tell the waiting ranks
// from the one they wait for.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <exception>
#include <memory>
#include <string>

namespace magic::dist {

// This thread's phase; set_phase publishes it when a publisher is attached (and raises there
// when MAGIC_RAISE_AT asks it to: raise_hook.h).
void set_phase(std::string phase);
std::string current_phase();
// What this thread waits in ("all_reduce on group 'world'"): set while a WaitingScope lasts, and
// kept when it ended by an exception; "" otherwise.
std::string current_waiting();

// Sets the phase for a scope and restores the enclosing one at its end, unless the scope ends by
// an exception: then the inner phase stays, as the place where the rank failed.
class PhaseScope {
 public:
  explicit PhaseScope(std::string phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  std::string enclosing_;
  int exceptions_;
};

// Marks this thread's rank as "waiting in <operation> on group '<group>'" for the scope. If the
// scope ends by an exception (the wait failed), the mark stays: the rank failed while waiting.
class WaitingScope {
 public:
  WaitingScope(const char* operation, const std::string& group);
  ~WaitingScope();
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;

 private:
  int exceptions_;
};

// Publishes the progress of the constructing thread as `rank` through `store` until destroyed
// (then publishes the last state once more). `store` is used from the publisher's own thread
// only: give it a store that is safe to share (HashStore) or a connection of its own (TCPStore).
// Publishing is best effort: a store that fails is not used again.
class ProgressPublisher {
 public:
  ProgressPublisher(c10::intrusive_ptr<c10d::Store> store, int rank);
  ~ProgressPublisher();
  ProgressPublisher(const ProgressPublisher&) = delete;
  ProgressPublisher& operator=(const ProgressPublisher&) = delete;

  struct Board;

 private:
  std::shared_ptr<Board> board_;
  std::shared_ptr<Board> enclosing_;
};

// A rank's published state, as the launcher reads it.
struct RankProgress {
  bool known = false;   // the rank published (or the launcher preset) a state
  std::string phase;    // "training step 2"
  std::string waiting;  // "all_reduce on group 'world#0'", or "" when not waiting
};
std::string progress_key(int rank);
void write_progress(c10d::Store& store, int rank, const RankProgress& progress);
// Does not block: an absent key reads as unknown.
RankProgress read_progress(c10d::Store& store, int rank);

// The text to show a user for `e`: one line, without the C++ backtrace that c10::Error::what()
// carries (what_without_backtrace(), and frames cut from any other message).
std::string one_line_error(const std::exception& e);

// Writes `text` (full messages, backtraces) to stderr when the launcher has made stderr this
// rank's log (MAGIC_RANK_LOG is set); elsewhere stderr is the user's terminal and gets nothing.
void note_in_rank_log(const std::string& text);

}  // namespace magic::dist
