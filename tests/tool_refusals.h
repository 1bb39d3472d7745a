// What magic-check's and magic-run's command-line parsers refuse `args` with, judged in-process
// (tests/flag_refusal.h): the InputError's message, or "(accepted)". Only in magic_tests, which
// links the two parsers (tools/check_command.h, tools/run_flags.h).
#pragma once

#include <string>

namespace magic::testing {

std::string magic_check_refusal(const std::string& args);
std::string magic_run_refusal(const std::string& args);

}  // namespace magic::testing
