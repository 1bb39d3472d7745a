// SIGPIPE ignored for a scope: a write to a pipe or socket whose reader is gone then fails with
// EPIPE, which the writer reports naming itself, instead of ending the whole process without a
// word (exit 141). The disposition found is restored at the scope's end.
#pragma once

#include <csignal>

namespace magic {

class IgnoredSigpipe {
 public:
  IgnoredSigpipe() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &saved_);
  }
  ~IgnoredSigpipe() { sigaction(SIGPIPE, &saved_, nullptr); }
  IgnoredSigpipe(const IgnoredSigpipe&) = delete;
  IgnoredSigpipe& operator=(const IgnoredSigpipe&) = delete;

 private:
  struct sigaction saved_ {};
};

}  // namespace magic
