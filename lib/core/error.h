// Error types shared by every layer. InputError is the user's fault (exit code 2);
// anything else escaping a tool is a bug or a runtime failure.
#pragma once

#include <stdexcept>
#include <string>

namespace magic {

// Bad input: a malformed config, data file, topology string or size that does not divide.
// The message names the input and what was expected. It quotes the input's text, which reaches a
// terminal: every control byte and every byte that is not UTF-8 in it is kept as \xNN, so no
// file, flag or message can send the terminal an escape sequence or break the one line.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message);
  explicit InputError(const char* message) : InputError(std::string(message)) {}
};

// A distributed failure: a collective that timed out or lost a peer, a rank that died. The
// message names the operation, the group and the rank that saw it.
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit codes of every command-line program (docs/design.md, "Conventions we chose").
enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2 };

}  // namespace magic
