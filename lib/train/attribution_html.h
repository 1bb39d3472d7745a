// The --html report of one magic-run attribution (html_report.h): the facts and timings of the
// run, the queries, every example with its score and its chunk's text (and per-token scores over
// its tokens when the weights are per token), per-query columns, a warning when training looked
// non-smooth, and the LDS when the run was validated.
#pragma once

#include <optional>
#include <string>

#include "lib/io/html_report.h"
#include "lib/io/score_file.h"
#include "lib/train/attribution.h"

namespace magic {

struct AttributionPage {
  std::string config_path, config_json;  // the config as given, pretty-printed
  std::string train_path;                // the training data as the config names it
  std::string layout = "single process";
  std::string model, data_format, dtype;  // the Run table's: attribution_text.h's summaries, the precision
  std::optional<int64_t> shown_query;     // per-query runs: the ranked query
  std::string ranking_note;               // per-query runs: attribution_text.h's ranking_note
  int64_t top = 10;
  std::optional<HtmlLds> lds;
};

HtmlReport attribution_html(const Attribution& attribution, const ScoreTable& table, const AttributionPage& page);

}  // namespace magic
