// A tool's flag parsing judged in-process: a test checks many refusals without starting the
// program each time (a second of LibTorch loading a start).
#pragma once

#include <functional>
#include <string>

namespace magic::testing {

// What `parse` (argc, argv) refuses `args` with, the words split on spaces after the program's
// name: the InputError's message, or "(accepted)".
std::string flag_refusal(const std::function<void(int, char**)>& parse, const std::string& args);

}  // namespace magic::testing
