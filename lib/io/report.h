// The magic-check report: the run's settings, one row per compared tensor, and the outcome of
// each planted mutation under --bite. Written as a human table (stdout), JSON (--json; schema in
// docs/magic-check.md, "Report schema") and JUnit XML (--junit), each file atomically.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lib/compare/check_row.h"

namespace magic {

struct BiteOutcome {
  std::string mutation, description;
  std::string expected_level, expected_factor;
  // Nothing failed: observed_level is empty, and under --bite the diagnosis says how far the run
  // went ("through grad": a mutation's run computes its levels up to the expected one).
  std::string observed_level, observed_factor, observed_diagnosis;
  bool caught = false;
  // False when the observed scale is also the value of another named size ("x n_per_block =
  // x n_ppgd"): the catch does not prove which factor it was.
  bool factor_distinct = true;
  // Where the mutated run first differed from the reference ("first divergence: ..."), or "".
  std::string first_divergence;
};

// A mutation of the topology's family that --bite did not run, and why.
struct BiteSkip {
  std::string mutation, reason;
};

// The rank a failed run is blamed on: the first to fail with an error of its own (or the rank the
// launcher saw die, stop or stall), with the phase it was in and its one-line message.
struct FailedRank {
  int64_t rank = 0;
  std::string kind;  // "failed", "crashed", "error", "killed", "stopped", ... (rank_failure.h)
  std::string phase, message;
  bool fails_the_check = false;  // the code under test failed: exit 1 rather than 2
};

struct CheckReport {
  std::string topology;
  int64_t world_size = 1;
  std::string workload, dtype, convention, backend;
  std::string config;  // the magic-run config checked (--config), "" for the built-in workload
  std::string model;   // the model folder of the built-in workload (--model), "" for its own GPT
  int64_t steps = 0;
  uint64_t seed = 0;
  double label_smoothing = 0.0;  // ε of the lm workload's training loss
  std::string mutation;          // planted in `rows` ("" for a clean run)
  std::vector<CheckRow> rows;
  std::vector<std::string> notes;  // run-level explanations printed under the table
  // Where a failing run first differed from the reference ("first divergence: step 0, ..."), or "".
  std::string first_divergence;
  bool bite_mode = false;
  std::vector<BiteOutcome> bite;
  std::vector<BiteSkip> bite_skipped;
  double seconds = 0.0;
  // Why the run ended before a report could be made (a rank failed); "" for a run that finished.
  // Such a report has no rows, fails, and carries this as its one test case's message.
  std::string failure;
  // With `failure`: the rank it is blamed on, when one is named (its test case is named after it).
  std::optional<FailedRank> failed_rank;

  // False when a row failed, and when there are no rows at all (nothing was checked).
  bool rows_pass() const;
  // Every mutation run was caught, and at least one ran.
  bool all_caught() const;
  // 0 when everything that should pass passed: the rows of a clean run, and under --bite every
  // mutation caught; 1 otherwise (a --mutate run whose bug is caught fails its rows: 1). A run
  // that ended with `failure`: 1 when its failed rank failed the check, else 2.
  int exit_code() const;
};

void print_report(const CheckReport& report, std::ostream& out);
nlohmann::ordered_json report_json(const CheckReport& report);
void write_json_report(const std::string& path, const CheckReport& report);
void write_junit_report(const std::string& path, const CheckReport& report);
std::string junit_xml(const CheckReport& report);

}  // namespace magic
