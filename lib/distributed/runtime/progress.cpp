#include "lib/distributed/runtime/progress.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/raise_hook.h"

namespace magic::dist {
namespace {

// A rank's state in the store: "<phase>\n<waiting>".
std::string encode_progress(const RankProgress& progress) {
  return progress.phase + "\n" + progress.waiting;
}

}  // namespace

struct ProgressPublisher::Board {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;

  std::mutex mutex;  // guards everything below
  std::condition_variable changed;
  RankProgress state;
  bool phase_changed = false;
  bool stopping = false;
  bool store_failed = false;
  std::string published;
  std::thread thread;

  // Writes the state if it differs from the last one written; called with `lock` held.
  void publish(std::unique_lock<std::mutex>& lock) {
    const RankProgress snapshot = state;
    const std::string value = encode_progress(snapshot);
    if (value == published || store_failed) return;
    lock.unlock();
    bool ok = true;
    try {
      write_progress(*store, rank, snapshot);
    } catch (...) {
      ok = false;  // the store is gone (the run is ending): progress is best effort
    }
    lock.lock();
    published = value;
    store_failed = store_failed || !ok;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      publish(lock);
      // Phase changes wake us at once; waits are picked up by the next tick, so a collective that
      // completes quickly is never written to the store.
      changed.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping || phase_changed; });
      phase_changed = false;
    }
  }
};

namespace {

thread_local std::string this_phase;
thread_local std::string this_waiting;
thread_local std::shared_ptr<ProgressPublisher::Board> this_board;

// set_phase without the raise hook: PhaseScope's destructor restores a phase with it.
void publish_phase(std::string phase) {
  this_phase = std::move(phase);
  if (auto& board = this_board) {
    std::lock_guard<std::mutex> lock(board->mutex);
    board->state.phase = this_phase;
    board->phase_changed = true;
    board->changed.notify_one();
  }
}

}  // namespace

void set_phase(std::string phase) {
  publish_phase(std::move(phase));
  if (const auto& board = this_board) raise_if_asked(this_phase, board->rank);
}

std::string current_phase() {
  return this_phase;
}

std::string current_waiting() {
  return this_waiting;
}

PhaseScope::PhaseScope(std::string phase) : enclosing_(this_phase), exceptions_(std::uncaught_exceptions()) {
  set_phase(std::move(phase));
}

PhaseScope::~PhaseScope() {
  if (std::uncaught_exceptions() > exceptions_) return;
  publish_phase(std::move(enclosing_));
}

WaitingScope::WaitingScope(const char* operation, const std::string& group) : exceptions_(std::uncaught_exceptions()) {
  this_waiting = str_cat(operation, " on group '", group, "'");
  if (auto& board = this_board) {
    std::lock_guard<std::mutex> lock(board->mutex);
    board->state.waiting = this_waiting;
  }
}

WaitingScope::~WaitingScope() {
  const bool failed = std::uncaught_exceptions() > exceptions_;
  if (!failed) this_waiting.clear();
  auto& board = this_board;
  if (!board) return;
  std::lock_guard<std::mutex> lock(board->mutex);
  if (failed) {
    board->phase_changed = true;  // publish the failed wait now
    board->changed.notify_one();
    return;
  }
  board->state.waiting.clear();
}

ProgressPublisher::ProgressPublisher(c10::intrusive_ptr<c10d::Store> store, int rank)
    : board_(std::make_shared<Board>()), enclosing_(this_board) {
  board_->store = std::move(store);
  board_->rank = rank;
  board_->state.known = true;
  board_->state.phase = this_phase;
  board_->thread = std::thread([board = board_.get()] { board->run(); });
  this_board = board_;
}

ProgressPublisher::~ProgressPublisher() {
  {
    std::lock_guard<std::mutex> lock(board_->mutex);
    board_->stopping = true;
  }
  board_->changed.notify_one();
  board_->thread.join();
  std::unique_lock<std::mutex> lock(board_->mutex);
  board_->publish(lock);
  if (this_board == board_) this_board = enclosing_;
}

std::string progress_key(int rank) {
  return str_cat("magic/progress/", rank);
}

void write_progress(c10d::Store& store, int rank, const RankProgress& progress) {
  const std::string value = encode_progress(progress);
  store.set(progress_key(rank), std::vector<uint8_t>(value.begin(), value.end()));
}

RankProgress read_progress(c10d::Store& store, int rank) {
  RankProgress progress;
  const std::string key = progress_key(rank);
  if (!store.check({key})) return progress;
  const std::vector<uint8_t> bytes = store.get(key);
  const std::string value(bytes.begin(), bytes.end());
  const size_t newline = value.find('\n');
  progress.known = true;
  progress.phase = value.substr(0, newline);
  if (newline != std::string::npos) progress.waiting = value.substr(newline + 1);
  return progress;
}

std::string one_line_error(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  for (const char* frames : {"Exception raised from", "frame #"}) {
    if (const size_t cut = text.find(frames); cut != std::string::npos) text.resize(cut);
  }
  std::string line;
  for (char c : text) {
    if (c == '\n') {
      if (!line.empty() && line.back() != ' ') line += "; ";
    } else {
      line += c;
    }
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == ';')) line.pop_back();
  return line;
}

void note_in_rank_log(const std::string& text) {
  if (std::getenv("MAGIC_RANK_LOG") == nullptr) return;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace magic::dist
