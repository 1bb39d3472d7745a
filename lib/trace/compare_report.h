// magic-compare's report: one row per record in the run's order, the first divergence, and a
// verdict; as a table (stdout), JSON (--json; schema in docs/magic-compare.md) and JUnit XML
// (--junit), each file written atomically and on every exit path.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

#include "lib/trace/dump_comparison.h"

namespace magic {

struct CompareReport {
  std::string candidate, reference;                // the paths given
  std::string candidate_layout, reference_layout;  // "dp=2 (2 ranks)", "single process"
  DumpComparison comparison;
  double seconds = 0.0;
  // Why no comparison could be made (a dump refused: exit 2); "" otherwise.
  std::string failure;

  // 0 every record within tolerance, 1 a record failed (or none compared), 2 `failure`.
  int exit_code() const;
};

void print_compare_report(const CompareReport& report, std::ostream& out);
nlohmann::ordered_json compare_report_json(const CompareReport& report);
std::string compare_junit_xml(const CompareReport& report);
void write_compare_json(const std::string& path, const CompareReport& report);
void write_compare_junit(const std::string& path, const CompareReport& report);

}  // namespace magic
