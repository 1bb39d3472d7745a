#include "lib/trace/compare_report.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"

namespace magic {
namespace {

using json = nlohmann::ordered_json;

json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

std::string step_text(int64_t step) {
  return step >= 0 ? std::to_string(step) : "-";
}

// The diagnosis column: the factor or what differs, and where for sharded records.
std::string diagnosis_text(const RecordRow& r) {
  if (r.row.passed) return "";
  return r.where.empty() ? r.row.diagnosis.text : r.row.diagnosis.text + " (" + r.where + ")";
}

int failed_rows(const DumpComparison& c) {
  return static_cast<int>(
      std::count_if(c.rows.begin(), c.rows.end(), [](const RecordRow& r) { return !r.row.passed; }));
}

}  // namespace

int CompareReport::exit_code() const {
  if (!failure.empty()) return 2;
  return comparison.passed() ? 0 : 1;
}

void print_compare_report(const CompareReport& r, std::ostream& out) {
  out << "magic-compare: " << r.candidate << " (" << r.candidate_layout << ") against " << r.reference << " ("
      << r.reference_layout << ")\n\n";
  const auto& rows = r.comparison.rows;
  size_t name_width = 20;
  for (const auto& row : rows) name_width = std::max(name_width, row.record.name.size() + 1);
  // A micro-batch column only where some record belongs to one, so other reports read as before.
  const bool micro =
      std::any_of(rows.begin(), rows.end(), [](const RecordRow& x) { return x.record.micro_batch >= 0; });
  out << pad("step", 6) << (micro ? pad("mb", 4) : "") << pad("phase", 11) << pad("order", 13) << pad("kind", 17)
      << pad("tensor", name_width) << pad("scale", 11) << pad("worst rel err", 15) << pad("cosine", 11)
      << "verdict  diagnosis\n";
  for (const auto& row : rows) {
    const std::string verdict = row.row.passed ? "pass" : "FAIL";
    const std::string diagnosis = diagnosis_text(row);
    out << pad(step_text(row.record.step), 6) << (micro ? pad(step_text(row.record.micro_batch), 4) : "")
        << pad(row.record.phase, 11) << pad(row.record.order, 13) << pad(row.record.kind, 17)
        << pad(row.record.name, name_width)
        << pad(std::isfinite(row.row.stats.scale) ? format_fixed(row.row.stats.scale, 6) : "-", 11)
        << pad(std::isfinite(row.row.stats.worst_rel_err) ? format_sci(row.row.stats.worst_rel_err, 1) : "-", 15)
        << pad(std::isfinite(row.row.stats.cosine) ? format_fixed(row.row.stats.cosine, 6) : "-", 11)
        << (diagnosis.empty() ? verdict : pad(verdict, 9) + diagnosis) << "\n";
  }
  const int failed = failed_rows(r.comparison);
  if (rows.empty()) {
    out << "\nFAIL: no record was compared\n";
  } else {
    out << "\n"
        << (failed == 0 ? "PASS" : "FAIL") << ": " << rows.size() - failed << " of " << rows.size()
        << " records within tolerance\n";
  }
  if (r.comparison.first_divergence) {
    out << r.comparison.first_divergence_line() << "\n";
  } else if (!rows.empty()) {
    out << "no divergence: every record agrees to " << format_sci(r.comparison.earlier_agreement, 0) << "\n";
  }
  out << "(" << format_fixed(r.seconds, 1) << " s)\n";
}

json compare_report_json(const CompareReport& r) {
  json records = json::array();
  for (const auto& row : r.comparison.rows) {
    records.push_back({{"step", row.record.step},
                       {"micro_batch", row.record.micro_batch},
                       {"phase", row.record.phase},
                       {"order", row.record.order},
                       {"kind", row.record.kind},
                       {"name", row.record.name},
                       {"layer", row.record.layer},
                       {"scale", number(row.row.stats.scale)},
                       {"mean_ratio", number(row.row.stats.mean_ratio)},
                       {"worst_rel_err", number(row.row.stats.worst_rel_err)},
                       {"cosine", number(row.row.stats.cosine)},
                       {"tolerance", row.row.tolerance},
                       {"numel", row.row.stats.numel},
                       {"verdict", row.row.passed ? "pass" : "fail"},
                       {"diagnosis", row.row.diagnosis.text},
                       {"factor", row.row.diagnosis.factor},
                       {"where", row.where},
                       {"after_first_divergence", row.after_first_divergence}});
  }
  json first = nullptr;
  if (r.comparison.first_divergence) {
    const size_t i = *r.comparison.first_divergence;
    const RecordRow& row = r.comparison.rows[i];
    first = {{"index", i},
             {"step", row.record.step},
             {"micro_batch", row.record.micro_batch},
             {"phase", row.record.phase},
             {"order", row.record.order},
             {"kind", row.record.kind},
             {"name", row.record.name},
             {"where", row.where},
             {"factor", row.row.diagnosis.factor},
             {"diagnosis", row.row.diagnosis.text},
             {"earlier_agreement", r.comparison.earlier_agreement},
             {"line", r.comparison.first_divergence_line()}};
  }
  return json{{"tool", "magic-compare"},
              {"candidate", {{"path", r.candidate}, {"layout", r.candidate_layout}}},
              {"reference", {{"path", r.reference}, {"layout", r.reference_layout}}},
              {"passed", r.exit_code() == 0},
              {"seconds", r.seconds},
              {"records", records},
              {"first_divergence", first},
              {"failure", r.failure.empty() ? json(nullptr) : json(r.failure)}};
}

std::string compare_junit_xml(const CompareReport& r) {
  const auto& rows = r.comparison.rows;
  const bool empty = rows.empty();
  const int failures = failed_rows(r.comparison) + (empty ? 1 : 0);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"magic-compare\" tests=\"" << rows.size() + (empty ? 1 : 0) << "\" failures=\"" << failures
    << "\" time=\"" << r.seconds << "\">\n"
    << "  <testsuite name=\"" << xml_escape("magic-compare " + r.candidate + " " + r.reference) << "\" tests=\""
    << rows.size() + (empty ? 1 : 0) << "\" failures=\"" << failures << "\">\n";
  if (empty) {
    const std::string why = r.failure.empty() ? "no record was compared" : r.failure;
    x << "    <testcase classname=\"report\" name=\"records\">\n      <failure message=\"" << xml_escape(why)
      << "\"/>\n    </testcase>\n";
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const RecordRow& row = rows[i];
    const std::string micro = row.record.micro_batch >= 0 ? str_cat(" micro-batch ", row.record.micro_batch) : "";
    x << "    <testcase classname=\""
      << xml_escape(str_cat("step ", step_text(row.record.step), micro, ".", row.record.phase)) << "\" name=\""
      << xml_escape(row.record.name + " " + row.record.kind + " (" + row.record.order + ")") << "\"";
    if (row.row.passed) {
      x << "/>\n";
      continue;
    }
    std::string message = diagnosis_text(row);
    if (r.comparison.first_divergence == i) message += " [first divergence]";
    x << ">\n      <failure message=\"" << xml_escape(message) << "\">"
      << xml_escape(str_cat("scale ", row.row.stats.scale, ", worst rel err ", row.row.stats.worst_rel_err, " > ",
                            row.row.tolerance, ", cosine ", row.row.stats.cosine))
      << "</failure>\n    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

void write_compare_json(const std::string& path, const CompareReport& report) {
  write_file_atomically(path, compare_report_json(report).dump(2) + "\n");
}

void write_compare_junit(const std::string& path, const CompareReport& report) {
  write_file_atomically(path, compare_junit_xml(report));
}

}  // namespace magic
