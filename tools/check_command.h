// magic-check's command line: every flag parsed and validated before any rank starts, so that a
// bad one is an InputError naming it (exit 2) and tests judge the refusals without the program.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "checks/run_check.h"
#include "lib/distributed/runtime/rank_program.h"
#include "tools/trace_flags.h"

namespace magic {

struct CheckCommand {
  checks::CheckRequest request;
  std::string json_path, junit_path;
  dist::RankProgram program;
  bool list_mutations = false;
  int64_t mutation_runs = 0;                 // --bite: the planted runs beside the clean one
  std::optional<CheckedTraceOptions> trace;  // --trace-port, --trace-file: the live tracer (docs/tracer.md)
};
// Parses and validates argv; throws InputError. --help, --list-mutations and --explain-layout
// print and set early_exit (the exit code) instead of returning a command to run.
CheckCommand parse_check_command(int argc, char** argv, int& early_exit);

// --list-mutations: the catalog with each mutation's expected level, factor and conditions.
void list_mutations(std::ostream& out);

}  // namespace magic
