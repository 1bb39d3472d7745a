// magic-run's command line: every flag and the output folders checked before anything is loaded
// or trained, so that a bad one is an InputError naming it (exit 2) and tests judge the refusals
// without the program. The config's own values are checked when it is loaded (run_config.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/value_sources.h"
#include "lib/distributed/runtime/rank_program.h"
#include "lib/train/lds.h"
#include "lib/train/run_folder.h"
#include "tools/trace_flags.h"

namespace magic {

// What --out holds after a run: a rerun replaces these, and refuses a folder holding anything else.
extern const std::vector<std::string> kOutFiles;

struct RunFlags {
  std::string config_path, out_dir;
  std::string plan_dir;  // --export-plan: the run's plan for another implementation (docs/plan-format.md)
  int64_t top = 5;
  bool per_query = false;
  std::optional<int64_t> query_index;
  std::optional<int64_t> query_batch;        // --query-batch: per-query products in one backward pass
  bool retrace_per_query = false;            // --retrace-per-query: no graph kept between the products
  std::optional<dist::RankProgram> program;  // --topology: a distributed run
  bool html = false;
  std::optional<LdsOptions> lds;  // --validate lds
  ResumeMode resume = ResumeMode::kFresh;
  bool keep_checkpoints = false;
  std::string dump_dir;                      // --dump: the run's trace records (docs/dump-format.md)
  std::optional<CheckedTraceOptions> trace;  // --trace-port, --trace-file: the live tracer (docs/tracer.md)
  std::vector<ConfigOverride> overrides;     // --section.key VALUE: config keys set on the command line
  std::vector<std::string> command;          // the command line, for run.json
  bool explain_layout = false;               // --explain-layout: print the layout's ranks and groups, run nothing
};

// Parses and checks argv; throws InputError. --help sets early_exit instead.
RunFlags parse_run_flags(int argc, char** argv, int& early_exit);

}  // namespace magic
