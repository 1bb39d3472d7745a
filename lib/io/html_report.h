// The --html report of magic-run: one self-contained page (inline CSS and SVG,
// no script, no external resources) with the run's facts, the most helpful and
// harmful examples, a per-token heat map, a score histogram and the LDS check.
// Torch-free, so it builds and tests in seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace magic {

struct HtmlExample {
  std::string id;
  std::string text;                  // the document text
  double score = 0;                  // dQ/dw summed over tokens; per-query runs: for the shown query
  std::vector<std::string> tokens;   // per-token runs: the token strings (single bytes for byte-level)
  std::vector<double> token_scores;  // same length as tokens, or empty
  std::vector<double> per_query;     // per-query runs: one score per query, in query_ids order
};

struct HtmlLds {
  double mean = 0, low = 0,
         high = 0;  // mean over queries and its confidence interval
  double level = 0.95;
  int64_t subsets = 0;
  double drop_fraction = 0;
  std::vector<std::string> query_ids;
  std::vector<double> per_query;
};

struct HtmlReport {
  std::string title;
  std::string config_json;                                   // pretty-printed run configuration
  std::vector<std::pair<std::string, double>> timings;       // phase name, seconds
  std::vector<std::pair<std::string, std::string>> facts;    // free key/value lines
  std::vector<std::string> query_ids;                        // per-query runs only
  std::string shown_query = "the query set";                 // the query the ranking is for
  std::string ranking_note;                                  // per-query runs: which query ranks, how to pick another
  std::vector<std::pair<std::string, std::string>> queries;  // every query: id, text
  std::optional<std::string> warning;                        // e.g. training looked non-smooth
  std::vector<HtmlExample> examples;                         // all training examples, any order
  int64_t top = 10;                                          // rows in each of the two tables
  std::optional<HtmlLds> lds;
};

std::string render_html_report(const HtmlReport& report);

// Renders and writes through magic::write_file_atomically; throws InputError
// naming the path.
void write_html_report(const std::string& path, const HtmlReport& report);

// Text made safe for HTML content and attribute values: & < > " ' escaped,
// each byte that is not UTF-8 and each control character (other than tab,
// newline, carriage return) written as the four characters \xNN, as the
// terminal's rows and scores.tsv write a byte that is not UTF-8.
std::string html_escape(std::string_view text);

// A score as "-1.52e-03" (3 significant digits); "nan", "inf", "-inf" when not
// finite.
std::string format_score(double value);

}  // namespace magic
