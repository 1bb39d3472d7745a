#include "lib/io/report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "lib/core/dtype.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"

namespace magic {
namespace {

nlohmann::ordered_json number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// "nothing failed through grad": a bite run that computed its levels up to the expected one.
std::string join_nonempty(const std::string& head, const std::string& tail) {
  return tail.empty() ? head : head + " " + tail;
}

// The last two columns, without trailing blanks where there is no diagnosis.
std::string verdict_and_diagnosis(const CheckRow& row) {
  const std::string verdict = row.passed ? "pass" : "FAIL";
  return row.diagnosis.text.empty() ? verdict : pad(verdict, 9) + row.diagnosis.text;
}

// NaN marks a row that could not be compared (a tensor missing on one side).
std::string fixed6(double v) {
  return std::isnan(v) ? "-" : std::isfinite(v) ? format_fixed(v, 6) : "inf";
}
std::string sci(double v) {
  return std::isnan(v) ? "-" : std::isfinite(v) ? format_sci(v, 1) : "inf";
}

std::string skipped_names(const std::vector<BiteSkip>& skipped) {
  std::vector<std::string> names;
  for (const auto& k : skipped) names.push_back(k.mutation);
  return join(names, ", ");
}

std::string expected_text(const BiteOutcome& b) {
  return b.expected_factor.empty() ? b.expected_level : b.expected_level + ", " + b.expected_factor;
}

// "an fp64 golden run", from the dtype of the golden tensors the rows were compared with ("" for
// none; "an fp64/fp32 golden run" where they differ): what was compared, not what was meant.
std::string golden_run(const std::vector<CheckRow>& rows) {
  std::vector<std::string> dtypes;
  for (const auto& row : rows) {
    if (!row.precision) continue;
    const std::string d = dtype_name(row.precision->golden_dtype);
    if (std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end()) dtypes.push_back(d);
  }
  if (dtypes.empty()) return "";
  const char* article = dtypes.front()[0] == 'f' ? "an " : "a ";  // "an fp64", "a bf16"
  return str_cat(article, join(dtypes, "/"), " golden run");
}

// {"rank", "kind", "phase", "message"} of the rank a failed run is blamed on, else null.
nlohmann::ordered_json failed_rank_json(const CheckReport& r) {
  if (r.failure.empty() || !r.failed_rank) return nullptr;
  const FailedRank& f = *r.failed_rank;
  return {{"rank", f.rank},
          {"kind", f.kind},
          {"phase", f.phase.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.phase)},
          {"message", f.message}};
}

}  // namespace

bool CheckReport::rows_pass() const {
  if (rows.empty()) return false;
  for (const auto& r : rows) {
    if (!r.passed) return false;
  }
  return true;
}

bool CheckReport::all_caught() const {
  if (bite.empty()) return false;  // a bite that ran nothing proves nothing
  for (const auto& b : bite) {
    if (!b.caught) return false;
  }
  return true;
}

int CheckReport::exit_code() const {
  if (!failure.empty()) return failed_rank && failed_rank->fails_the_check ? 1 : 2;
  if (bite_mode) return rows_pass() && all_caught() ? 0 : 1;
  return rows_pass() ? 0 : 1;
}

void print_report(const CheckReport& r, std::ostream& out) {
  // Below fp64 the header says what the policy was judged against.
  const std::string golden = golden_run(r.rows);
  out << "magic-check: " << r.topology << " (" << r.world_size << " ranks, " << r.backend << "), " << r.workload
      << " workload" << (r.config.empty() ? "" : " of " + r.config) << (r.model.empty() ? "" : " on model " + r.model)
      << ", " << r.dtype << (golden.empty() ? "" : " (judged against " + golden + ")") << ", " << r.convention
      << " convention, " << r.steps << " steps, seed " << r.seed;
  if (!r.mutation.empty()) out << ", mutation " << r.mutation;
  out << "\n\n";
  // The tensor column fits the longest name ("blocks.0.attn.proj.weight[reduction]").
  size_t tensor_width = 26;
  for (const auto& row : r.rows) tensor_width = std::max(tensor_width, row_label(row).size() + 1);
  const bool three_runs =
      std::any_of(r.rows.begin(), r.rows.end(), [](const CheckRow& row) { return row.precision || row.reduction; });
  if (three_runs) {
    // err(D,G): candidate vs fp64; err(R,G): the policy's reference vs fp64; allowed = k·err(R,G) +
    // floor ("-": values not judged); err(D,R): candidate vs the policy's reference, and its
    // bound ("-": none applies).
    out << pad("level", 13) << pad("tensor", tensor_width) << pad("scale", 11) << pad("cosine", 11)
        << pad("err(D,G)", 10) << pad("err(R,G)", 10) << pad("allowed", 10) << pad("err(D,R)", 10) << pad("bound", 10)
        << pad("verdict", 9) << "diagnosis\n";
  } else {
    out << pad("level", 13) << pad("tensor", tensor_width) << pad("scale", 11) << pad("mean(dist/ref)", 16)
        << pad("worst rel err", 15) << pad("cosine", 11) << pad("verdict", 9) << "diagnosis\n";
  }
  int failed = 0;
  for (const auto& row : r.rows) {
    failed += !row.passed;
    if (three_runs && row.reduction) {
      // A reduction row: err(D,R) is the reduced gradient against the exact sum of its terms.
      out << pad(row.level, 13) << pad(row_label(row), tensor_width) << pad(fixed6(row.stats.scale), 11)
          << pad(fixed6(row.stats.cosine), 11) << pad("-", 10) << pad("-", 10) << pad("-", 10)
          << pad(sci(row.reduction->worst), 10) << pad(sci(row.reduction->bound), 10) << verdict_and_diagnosis(row)
          << "\n";
      continue;
    }
    if (three_runs && row.precision) {
      const PrecisionErrors& e = *row.precision;
      out << pad(row.level, 13) << pad(row_label(row), tensor_width) << pad(fixed6(row.stats.scale), 11)
          << pad(fixed6(row.stats.cosine), 11) << pad(sci(e.candidate_golden), 10) << pad(sci(e.reference_golden), 10)
          << pad(e.values_judged ? sci(e.allowed_golden) : "-", 10) << pad(sci(row.stats.worst_rel_err), 10)
          << pad(e.bound ? sci(*e.bound) : "-", 10) << verdict_and_diagnosis(row) << "\n";
      continue;
    }
    if (three_runs) {
      // A row judged exactly in every precision (REPLAY's states, the shard weights): err(D,R)
      // against its tolerance.
      out << pad(row.level, 13) << pad(row_label(row), tensor_width) << pad(fixed6(row.stats.scale), 11)
          << pad(fixed6(row.stats.cosine), 11) << pad("-", 10) << pad("-", 10) << pad("-", 10)
          << pad(sci(row.stats.worst_rel_err), 10) << pad(sci(row.tolerance), 10) << verdict_and_diagnosis(row) << "\n";
      continue;
    }
    out << pad(row.level, 13) << pad(row_label(row), tensor_width) << pad(fixed6(row.stats.scale), 11)
        << pad(fixed6(row.stats.mean_ratio), 16) << pad(sci(row.stats.worst_rel_err), 15)
        << pad(fixed6(row.stats.cosine), 11) << verdict_and_diagnosis(row) << "\n";
  }
  if (r.rows.empty()) {
    out << "\nFAIL: no tensor was compared\n";
  } else {
    out << "\n" << (failed == 0 ? "PASS" : "FAIL") << ": " << r.rows.size() - failed << " of " << r.rows.size();
    if (three_runs) {
      out << " checks within the low-precision criterion (" << r.dtype << " against "
          << (golden.empty() ? "an fp64 golden run" : golden) << ": err(D,G) <= allowed, err(D,R) <= bound)\n";
    } else {
      out << " checks within tolerance (" << r.dtype
          << ": worst relative error <= " << format_sci(r.rows.front().tolerance, 0) << ")\n";
    }
  }
  if (!r.first_divergence.empty()) out << r.first_divergence << "\n";
  for (const auto& note : r.notes) out << "note: " << note << "\n";
  if (r.bite_mode) {
    out << "\nbite: does every check still catch the bugs it exists for?\n"
        << pad("mutation", 33) << pad("expected", 21) << pad("observed", 64) << "caught\n";
    int caught = 0;
    std::vector<std::string> blurred;
    for (const auto& b : r.bite) {
      caught += b.caught;
      std::string observed = b.observed_level.empty() ? join_nonempty("nothing failed", b.observed_diagnosis)
                                                      : b.observed_level + ": " + b.observed_diagnosis;
      out << pad(b.mutation, 33) << pad(expected_text(b), 21) << pad(observed, 64) << (b.caught ? "yes" : "NO") << "\n";
      if (b.caught && !b.factor_distinct) blurred.push_back(b.mutation + " (" + b.observed_factor + ")");
    }
    for (const auto& k : r.bite_skipped) out << pad(k.mutation, 33) << "skipped: " << k.reason << "\n";
    out << (r.all_caught() ? "BITE PASS" : "BITE FAIL") << ": " << caught << " of " << r.bite.size()
        << " applicable mutations caught with their expected level and factor";
    if (!r.bite_skipped.empty()) {
      out << " (" << r.bite_skipped.size() << " skipped: " << skipped_names(r.bite_skipped) << ")";
    }
    out << "\n";
    if (!blurred.empty()) {
      out << "note: on this layout some sizes are equal, so these factors cannot be told apart: " << join(blurred, "; ")
          << ". Judge factors on a layout whose sizes all differ.\n";
    }
    bool heading = false;
    for (const auto& b : r.bite) {
      if (b.first_divergence.empty()) continue;
      if (!heading) out << "where each mutation's difference began:\n";
      heading = true;
      out << "  " << pad(b.mutation, 33) << b.first_divergence << "\n";
    }
  }
  out << "(" << format_fixed(r.seconds, 1) << " s)\n";
}

nlohmann::ordered_json report_json(const CheckReport& r) {
  using json = nlohmann::ordered_json;
  json checks = json::array();
  for (const auto& row : r.rows) {
    json entry{{"level", row.level},
               {"tensor", row.tensor},
               {"pass", row.pass.empty() ? json(nullptr) : json(row.pass)},
               {"scale", number(row.stats.scale)},
               {"mean_ratio", number(row.stats.mean_ratio)},
               {"worst_rel_err", number(row.stats.worst_rel_err)},
               {"cosine", number(row.stats.cosine)},
               {"tolerance", row.tolerance},
               {"numel", row.stats.numel},
               {"verdict", row.passed ? "pass" : "fail"},
               {"diagnosis", row.diagnosis.text},
               {"factor", row.diagnosis.factor}};
    if (row.precision) {
      const PrecisionErrors& e = *row.precision;
      entry["precision"] = {
          {"candidate_vs_golden", number(e.candidate_golden)},
          {"reference_vs_golden", number(e.reference_golden)},
          {"allowed_vs_golden", number(e.allowed_golden)},
          {"candidate_vs_reference", number(row.stats.worst_rel_err)},
          {"bound", e.bound ? json(*e.bound) : json(nullptr)},
          {"values_judged", e.values_judged},
          {"factors_judged", e.factors_judged},
          {"candidate_representable", e.candidate_representable ? json(*e.candidate_representable) : json(nullptr)},
          {"reference_representable", e.reference_representable ? json(*e.reference_representable) : json(nullptr)}};
    }
    if (row.reduction) {
      const ReductionErrors& e = *row.reduction;
      entry["reduction"] = {{"worst_error", number(e.worst)},
                            {"bound", number(e.bound)},
                            {"terms", e.terms},
                            {"entries_over_bound", e.entries_over},
                            {"typical_error", number(e.typical_error)}};
    }
    checks.push_back(entry);
  }
  json bite = json::array();
  for (const auto& b : r.bite) {
    bite.push_back({{"mutation", b.mutation},
                    {"description", b.description},
                    {"expected", {{"level", b.expected_level}, {"factor", b.expected_factor}}},
                    {"observed",
                     {{"level", b.observed_level}, {"factor", b.observed_factor}, {"diagnosis", b.observed_diagnosis}}},
                    {"caught", b.caught},
                    {"factor_distinct", b.factor_distinct},
                    {"first_divergence", b.first_divergence.empty() ? json(nullptr) : json(b.first_divergence)}});
  }
  json skipped = json::array();
  for (const auto& k : r.bite_skipped) skipped.push_back({{"mutation", k.mutation}, {"reason", k.reason}});
  return json{{"tool", "magic-check"},
              {"topology", r.topology},
              {"world_size", r.world_size},
              {"workload", r.workload},
              {"config", r.config.empty() ? json(nullptr) : json(r.config)},
              {"model", r.model.empty() ? json(nullptr) : json(r.model)},
              {"dtype", r.dtype},
              {"convention", r.convention},
              {"backend", r.backend},
              {"steps", r.steps},
              {"seed", r.seed},
              {"label_smoothing", r.label_smoothing},
              {"mutation", r.mutation.empty() ? json(nullptr) : json(r.mutation)},
              {"passed", r.exit_code() == 0},
              {"seconds", r.seconds},
              {"checks", checks},
              {"notes", r.notes},
              {"first_divergence", r.first_divergence.empty() ? json(nullptr) : json(r.first_divergence)},
              {"bite", r.bite_mode ? bite : json(nullptr)},
              {"bite_skipped", r.bite_mode ? skipped : json(nullptr)},
              {"failure", r.failure.empty() ? json(nullptr) : json(r.failure)},
              {"failed_rank", failed_rank_json(r)}};
}

void write_json_report(const std::string& path, const CheckReport& report) {
  write_file_atomically(path, report_json(report).dump(2) + "\n");
}

std::string junit_xml(const CheckReport& r) {
  std::ostringstream x;
  // A report with no rows checked nothing: it gets one failing test case saying so.
  const bool empty = r.rows.empty();
  int failures = empty ? 1 : 0;
  for (const auto& row : r.rows) failures += !row.passed;
  // A --mutate run carries its one mutation's outcome in r.bite too; only --bite writes that suite.
  int bite_failures = 0;
  for (const auto& b : r.bite) bite_failures += r.bite_mode && !b.caught;
  const size_t row_tests = r.rows.size() + (empty ? 1 : 0);
  const size_t tests = row_tests + (r.bite_mode ? r.bite.size() + r.bite_skipped.size() : 0);
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"magic-check\" tests=\"" << tests << "\" failures=\"" << failures + bite_failures
    << "\" time=\"" << r.seconds << "\">\n";
  x << "  <testsuite name=\"" << xml_escape("magic-check " + r.topology) << "\" tests=\"" << row_tests
    << "\" failures=\"" << failures << "\">\n";
  if (empty) {
    const std::string why = r.failure.empty() ? "no tensor was compared" : r.failure;
    // A failed run's case is named after the rank it is blamed on and that rank's phase.
    const FailedRank* f = r.failure.empty() || !r.failed_rank ? nullptr : &*r.failed_rank;
    x << "    <testcase classname=\"" << (f ? xml_escape(str_cat("rank ", f->rank)) : "report") << "\" name=\""
      << (f ? xml_escape(f->phase.empty() ? "unknown phase" : f->phase) : "rows") << "\">\n      <failure message=\""
      << xml_escape(why) << "\"" << (f ? " type=\"" + xml_escape(f->kind) + "\"" : "") << "/>\n"
      << "    </testcase>\n";
  }
  for (const auto& row : r.rows) {
    x << "    <testcase classname=\"" << xml_escape(row.level) << "\" name=\"" << xml_escape(row_label(row)) << "\"";
    if (row.passed) {
      x << "/>\n";
      continue;
    }
    x << ">\n      <failure message=\"" << xml_escape(row.diagnosis.text) << "\">"
      << xml_escape(str_cat("scale ", row.stats.scale, ", mean(dist/ref) ", row.stats.mean_ratio, ", worst rel err ",
                            row.stats.worst_rel_err, " > ", row.tolerance, ", cosine ", row.stats.cosine))
      << "</failure>\n    </testcase>\n";
  }
  x << "  </testsuite>\n";
  if (r.bite_mode) {
    x << "  <testsuite name=\"" << xml_escape("bite " + r.topology) << "\" tests=\""
      << r.bite.size() + r.bite_skipped.size() << "\" failures=\"" << bite_failures << "\" skipped=\""
      << r.bite_skipped.size() << "\">\n";
    for (const auto& k : r.bite_skipped) {
      x << "    <testcase classname=\"bite\" name=\"" << xml_escape(k.mutation) << "\">\n      <skipped message=\""
        << xml_escape(k.reason) << "\"/>\n    </testcase>\n";
    }
    for (const auto& b : r.bite) {
      x << "    <testcase classname=\"bite\" name=\"" << xml_escape(b.mutation) << "\"";
      if (b.caught) {
        x << "/>\n";
        continue;
      }
      x << ">\n      <failure message=\"" << xml_escape("not caught with " + expected_text(b)) << "\">"
        << xml_escape("observed " + (b.observed_level.empty() ? join_nonempty("no failure", b.observed_diagnosis)
                                                              : b.observed_level + ": " + b.observed_diagnosis))
        << "</failure>\n    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return x.str();
}

void write_junit_report(const std::string& path, const CheckReport& report) {
  write_file_atomically(path, junit_xml(report));
}

}  // namespace magic
