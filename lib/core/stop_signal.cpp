#include "lib/core/stop_signal.h"

#include <cstring>

#include "lib/core/strings.h"

namespace magic {

namespace {

volatile sig_atomic_t recorded = 0;
constexpr std::array<int, 2> kSignals{SIGINT, SIGTERM};

void record(int sig) {
  recorded = sig;
}

}  // namespace

StopSignalScope::StopSignalScope() {
  recorded = 0;
  struct sigaction handler {};
  handler.sa_handler = record;
  sigemptyset(&handler.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &handler, &saved_[i]);
}

StopSignalScope::~StopSignalScope() {
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
}

int stop_signal() {
  return recorded;
}

void throw_if_stop_requested(const std::string& where) {
  const int sig = recorded;
  if (sig == 0) return;
  const char* abbrev = sigabbrev_np(sig);
  throw StopRequested(str_cat("stopped by signal ", sig, abbrev != nullptr ? str_cat(" (SIG", abbrev, ")") : "",
                              " during ", where));
}

}  // namespace magic
