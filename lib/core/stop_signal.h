// SIGINT and SIGTERM while a tool computes in its own process before any launcher supervises it
// (magic-check's reference runs, which can take minutes on a long check). The handler only
// records the signal; the long loops call throw_if_stop_requested between steps, so the tool ends
// through its usual error path (one line, its JSON and JUnit written, exit 2) instead of by the
// raw signal (exit 130 or 143).
#pragma once

#include <array>
#include <csignal>
#include <stdexcept>
#include <string>

namespace magic {

// The run was stopped by a signal; its message names the signal and where the run was.
class StopRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// For its lifetime SIGINT and SIGTERM are recorded instead of ending the process; the dispositions
// found are restored at its end. Scopes do not nest (one per process at a time).
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  std::array<struct sigaction, 2> saved_{};
};

// The signal recorded in the current scope, 0 if none.
int stop_signal();

// Throws StopRequested("stopped by signal 15 (SIGTERM) during <where>") when a signal was recorded.
void throw_if_stop_requested(const std::string& where);

}  // namespace magic
