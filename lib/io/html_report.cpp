#include "lib/io/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "lib/core/strings.h"
#include "lib/core/utf8.h"
#include "lib/io/atomic_file.h"

namespace magic {
namespace {

// Blue for helpful (negative), red for harmful (positive); the heat map,
// histogram and legend share them.
constexpr const char* kHelpfulRgb = "37,99,235";
constexpr const char* kHarmfulRgb = "220,38,38";
constexpr double kMaxAlpha = 0.85;  // keeps black text readable on the strongest colour
constexpr int kBins = 30;

template <typename... Args>
std::string printf_string(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.pop_back();
  return out;
}

std::string non_finite(double value) {
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}

std::string fixed(double value, int digits) {
  return std::isfinite(value) ? printf_string("%.*f", digits, value) : non_finite(value);
}

// Length of the valid UTF-8 sequence at s[i] (overlongs, surrogates and >
// U+10FFFF rejected), or 0.
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0Fu;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return n;
}

bool has_token_scores(const HtmlExample& ex) {
  return !ex.token_scores.empty() && ex.token_scores.size() == ex.tokens.size();
}

// The indices of the examples of one sign (negative: helpful; positive with `descending`:
// harmful), most negative (most positive) first, ties in input order. A ranking holds only its
// own sign: zero and NaN are in neither.
std::vector<size_t> ranked(const std::vector<HtmlExample>& examples, bool descending) {
  std::vector<size_t> order;
  for (size_t i = 0; i < examples.size(); ++i) {
    if (descending ? examples[i].score > 0 : examples[i].score < 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return descending ? examples[a].score > examples[b].score : examples[a].score < examples[b].score;
  });
  return order;
}

// "Most helpful (most negative score)", saying how many examples have that sign when fewer than
// `top` do.
std::string ranking_heading(const char* title, bool harmful, size_t of_sign, size_t examples, size_t top) {
  std::string h = str_cat(title, " (most ", harmful ? "positive" : "negative", " score");
  if (of_sign < top) {
    h += str_cat("; ", of_sign, " of the ", examples, " examples ", harmful ? "raise" : "lower", " the query loss");
  }
  return h + ")";
}

struct Segment {
  std::string text;
  double score = 0;
  int tokens = 0;
};

// Byte-level tokens split multi-byte characters: a token starting with a UTF-8
// continuation byte joins the previous segment, so each span holds whole
// characters. A segment's score is its tokens' sum.
std::vector<Segment> segments(const HtmlExample& ex) {
  std::vector<Segment> out;
  for (size_t i = 0; i < ex.tokens.size(); ++i) {
    const std::string& t = ex.tokens[i];
    const bool continues = !out.empty() && !t.empty() && (static_cast<unsigned char>(t[0]) & 0xC0) == 0x80;
    if (!continues) out.emplace_back();
    out.back().text += t;
    out.back().score += ex.token_scores[i];
    ++out.back().tokens;
  }
  return out;
}

std::string colour(double score, double scale) {
  const double alpha = std::isinf(score) ? kMaxAlpha : std::min(1.0, std::abs(score) / scale) * kMaxAlpha;
  return printf_string("rgba(%s,%.3f)", score < 0 ? kHelpfulRgb : kHarmfulRgb, alpha);
}

std::string heat_map(const HtmlExample& ex, double scale) {
  std::string out = "<span class=\"heat\">";
  std::string covered;
  for (const Segment& s : segments(ex)) {
    covered += s.text;
    std::string title = format_score(s.score);
    if (s.tokens > 1) title += printf_string(" (%d tokens)", s.tokens);
    std::string style;
    if (std::isnan(s.score)) {
      style = " class=\"nan\"";
    } else if (s.score != 0 && scale > 0) {
      style = " style=\"background:" + colour(s.score, scale) + "\"";
    }
    // An empty token (an end-of-document token, say) shows as a pilcrow so its
    // score stays visible.
    out +=
        "<span title=\"" + title + "\"" + style + ">" + (s.text.empty() ? "\xC2\xB6" : html_escape(s.text)) + "</span>";
  }
  // Tokens cut short at the context length: the unscored rest of the text,
  // greyed.
  if (ex.text.size() > covered.size() && ex.text.compare(0, covered.size(), covered) == 0) {
    out += "<span class=\"rest\" title=\"not scored\">" + html_escape(ex.text.substr(covered.size())) + "</span>";
  }
  return out + "</span>";
}

std::string score_cell(double score) {
  const char* sign = score < 0 ? " neg" : (score > 0 ? " pos" : "");
  return std::string("<td class=\"score") + sign + "\">" + format_score(score) + "</td>";
}

void ranking_table(std::ostringstream& out, const HtmlReport& r, const std::vector<size_t>& order, double scale,
                   const char* effect) {
  if (order.empty()) {
    if (r.top <= 0) {
      out << "<p>No examples.</p>\n";
    } else {
      out << "<p class=\"none\">None of the " << r.examples.size() << " examples " << effect
          << " the query loss.</p>\n";
    }
    return;
  }
  out << "<table "
         "class=\"ranking\"><thead><tr><th>#</th><th>id</th><th>score</th>";
  for (const std::string& q : r.query_ids) {
    out << "<th class=\"q" << (q == r.shown_query ? " shown" : "") << "\">" << html_escape(q) << "</th>";
  }
  out << "<th>text</th></tr></thead><tbody>\n";
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const HtmlExample& ex = r.examples[order[rank]];
    const std::string id = html_escape(ex.id);
    out << "<tr><td class=\"rank\">" << rank + 1 << "</td><td class=\"id\" data-id=\"" << id << "\">" << id << "</td>"
        << score_cell(ex.score);
    for (size_t q = 0; q < r.query_ids.size(); ++q) {
      out << (q < ex.per_query.size() ? score_cell(ex.per_query[q]) : "<td class=\"score\">&ndash;</td>");
    }
    out << "<td class=\"text\">";
    if (has_token_scores(ex)) {
      out << heat_map(ex, scale);
    } else {
      out << html_escape(ex.text);
      if (!ex.token_scores.empty()) {
        out << printf_string(
            " <em class=\"warn\">(heat map omitted: %zu token "
            "scores for %zu tokens)</em>",
            ex.token_scores.size(), ex.tokens.size());
      }
    }
    out << "</td></tr>\n";
  }
  out << "</tbody></table>\n";
}

std::string histogram_svg(const std::vector<HtmlExample>& examples) {
  std::vector<double> values;
  for (const HtmlExample& ex : examples) {
    if (std::isfinite(ex.score)) values.push_back(ex.score);
  }
  if (values.empty()) return "<p>No finite scores to plot.</p>\n";
  auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  double lo = *lo_it, hi = *hi_it;
  if (lo == hi) {  // one value: widen so it lands mid-plot
    const double pad = lo == 0 ? 1 : std::abs(lo) / 2;
    lo -= pad, hi += pad;
  }
  std::vector<int64_t> counts(kBins, 0);
  for (double x : values) ++counts[std::clamp(static_cast<int>((x - lo) / (hi - lo) * kBins), 0, kBins - 1)];
  const int64_t peak = *std::max_element(counts.begin(), counts.end());

  const double width = 760, height = 230, left = 52, right = 16, top = 20, bottom = 44;
  const double pw = width - left - right, ph = height - top - bottom, bw = pw / kBins;
  std::ostringstream svg;
  svg << printf_string(
             "<svg class=\"hist\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" role=\"img\">",
             width, height, width, height)
      << "<title>Histogram of " << values.size() << " scores</title>";
  for (int b = 0; b < kBins; ++b) {
    const double a = lo + (hi - lo) * b / kBins, z = lo + (hi - lo) * (b + 1) / kBins;
    const double h = ph * static_cast<double>(counts[b]) / static_cast<double>(peak);
    svg << printf_string(
               "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
               "height=\"%.1f\" fill=\"rgb(%s)\">",
               left + b * bw, top + ph - h, std::max(bw - 1, 0.5), h, (a + z) / 2 < 0 ? kHelpfulRgb : kHarmfulRgb)
        << "<title>[" << format_score(a) << ", " << format_score(z) << "): " << counts[b] << "</title></rect>";
  }
  svg << printf_string(
             "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" "
             "x2=\"%.1f\" y2=\"%.1f\"/>",
             left, top + ph, left + pw, top + ph)
      << printf_string(
             "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" "
             "x2=\"%.1f\" y2=\"%.1f\"/>",
             left, top, left, top + ph);
  if (lo <= 0 && 0 <= hi) {
    const double x0 = left + (0 - lo) / (hi - lo) * pw;
    svg << printf_string(
               "<line class=\"zero\" x1=\"%.1f\" y1=\"%.1f\" "
               "x2=\"%.1f\" y2=\"%.1f\"/>",
               x0, top - 6, x0, top + ph)
        << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">0</text>", x0, top - 9);
  }
  svg << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\">", left, top + ph + 16) << format_score(lo)
      << "</text>" << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", left + pw, top + ph + 16)
      << format_score(hi) << "</text>"
      << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, top + 4) << peak << "</text>"
      << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>", left - 6, top + ph)
      << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", left + pw / 2, top + ph + 36)
      << "score dQ/dw (" << kBins << " bins; count on the vertical axis)</text></svg>\n";
  const size_t skipped = examples.size() - values.size();
  if (skipped > 0) svg << "<p class=\"warn\">" << skipped << " non-finite scores not plotted.</p>\n";
  return svg.str();
}

// Every query with its index (magic-run --query takes it) and its text.
void queries_section(std::ostringstream& out, const HtmlReport& r) {
  out << "<section id=\"queries\"><h2>Queries (" << r.queries.size()
      << ")</h2>\n<table class=\"queries\"><thead><tr><th>#</th><th>id</th><th>text</th></tr></thead><tbody>\n";
  for (size_t q = 0; q < r.queries.size(); ++q) {
    const std::string id = html_escape(r.queries[q].first);
    out << "<tr" << (r.queries[q].first == r.shown_query ? " class=\"shown\"" : "") << "><td class=\"rank\">" << q
        << "</td><td class=\"id\">" << id << "</td><td class=\"text\">" << html_escape(r.queries[q].second)
        << "</td></tr>\n";
  }
  out << "</tbody></table></section>\n";
}

void lds_section(std::ostringstream& out, const HtmlLds& lds) {
  out << "<section id=\"lds\"><h2>Linear datamodeling score (LDS)</h2>\n<table "
         "class=\"kv\">"
      << "<tr><th>mean LDS</th><td>" << fixed(lds.mean, 3) << "</td></tr>"
      << "<tr><th>" << fixed(lds.level * 100, 0) << "% interval</th><td>" << fixed(lds.low, 3) << " to "
      << fixed(lds.high, 3) << "</td></tr>"
      << "<tr><th>subsets</th><td>" << lds.subsets << "</td></tr>"
      << "<tr><th>drop fraction</th><td>" << fixed(lds.drop_fraction, 3) << "</td></tr></table>\n";
  if (!lds.per_query.empty()) {
    out << "<table "
           "class=\"lds-queries\"><thead><tr><th>query</th><th>LDS</th></tr></"
           "thead><tbody>";
    for (size_t q = 0; q < lds.per_query.size(); ++q) {
      const std::string name = q < lds.query_ids.size() ? html_escape(lds.query_ids[q]) : std::to_string(q);
      out << "<tr><td class=\"id\">" << name << "</td><td class=\"num\">" << fixed(lds.per_query[q], 3) << "</td></tr>";
    }
    out << "</tbody></table>\n";
  }
  out << "</section>\n";
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;margin:0;background:#fff}
main{max-width:1240px;margin:0 auto;padding:20px 28px}
h1{font-size:21px;margin:4px 0 6px}
h2{font-size:16px;margin:26px 0 8px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse}
th,td{padding:3px 9px;text-align:left;vertical-align:top;border-bottom:1px solid #eaeef2}
thead th{background:#f6f8fa}
th.shown{text-decoration:underline}
td.rank{color:#656d76;text-align:right}
td.id{font-family:ui-monospace,monospace;white-space:nowrap}
td.score,td.num{font-family:ui-monospace,monospace;text-align:right;white-space:nowrap}
td.neg{color:#1d4ed8}td.pos{color:#b91c1c}
td.text{max-width:680px;white-space:pre-wrap;overflow-wrap:anywhere}
.heat span{border-radius:2px}.heat .rest{color:#8c959f}.heat .nan{outline:1px dashed #000}
.legend{display:inline-block;width:160px;height:10px;vertical-align:middle;margin:0 6px;border:1px solid #d0d7de}
.lede,.warn{color:#57606a}
.alert{color:#9a3412;background:#fff7ed;border:1px solid #fdba74;border-radius:4px;padding:6px 10px}
tr.shown td{background:#f6f8fa;font-weight:600}
table.lds-queries{margin-top:12px}
pre{background:#f6f8fa;padding:10px 12px;overflow:auto;font-size:12px;border-radius:4px}
svg.hist text{font-size:11px;fill:#57606a}
svg.hist .axis{stroke:#57606a}svg.hist .zero{stroke:#1f2328;stroke-dasharray:4 3}
)";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    if (n == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) {
      out += byte_escape(c);  // as the terminal rows and scores.tsv show it (lib/core/utf8.h)
      ++i;
      continue;
    }
    const char* entity = n == 1 ? markup_entity(text[i], "&#39;") : nullptr;
    if (entity) {
      out += entity;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string format_score(double value) {
  return std::isfinite(value) ? printf_string("%.2e", value) : non_finite(value);
}

std::string render_html_report(const HtmlReport& r) {
  const size_t top = static_cast<size_t>(std::max<int64_t>(r.top, 0));
  std::vector<size_t> helpful = ranked(r.examples, false), harmful = ranked(r.examples, true);
  const std::string helpful_heading = ranking_heading("Most helpful", false, helpful.size(), r.examples.size(), top);
  const std::string harmful_heading = ranking_heading("Most harmful", true, harmful.size(), r.examples.size(), top);
  helpful.resize(std::min(helpful.size(), top));
  harmful.resize(std::min(harmful.size(), top));
  // One colour scale for every shown heat map, so rows compare by eye.
  double scale = 0;
  bool heat = false;
  for (const auto* order : {&helpful, &harmful}) {
    for (size_t i : *order) {
      if (!has_token_scores(r.examples[i])) continue;
      heat = true;
      for (const Segment& s : segments(r.examples[i])) {
        if (std::isfinite(s.score)) scale = std::max(scale, std::abs(s.score));
      }
    }
  }

  std::ostringstream out;
  const std::string title = html_escape(r.title);
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<meta name=\"viewport\" content=\"width=device-width, "
         "initial-scale=1\"><title>"
      << title << "</title><style>" << kStyle << "</style></head>\n<body><main>\n<h1>" << title << "</h1>\n"
      << "<p class=\"lede\">Scores are dQ/dw for <b>" << html_escape(r.shown_query)
      << "</b>: negative means up-weighting the example lowers the query loss "
         "(helpful), positive raises it "
         "(harmful).</p>\n";
  if (!r.ranking_note.empty())
    out << "<p class=\"lede\" id=\"ranking-note\">" << html_escape(r.ranking_note) << "</p>\n";
  if (r.warning) out << "<p class=\"alert\" id=\"warning\">" << html_escape(*r.warning) << "</p>\n";

  out << "<section id=\"run\"><h2>Run</h2><table class=\"kv\">";
  for (const auto& [key, value] : r.facts) {
    out << "<tr><th>" << html_escape(key) << "</th><td>" << html_escape(value) << "</td></tr>";
  }
  for (const auto& [phase, seconds] : r.timings) {
    out << "<tr><th>" << html_escape(phase) << " time</th><td>" << fixed(seconds, 2) << " s</td></tr>";
  }
  out << "</table></section>\n";
  if (!r.queries.empty()) queries_section(out, r);

  if (heat) {
    out << "<p class=\"lede\">Token colours: helpful<span class=\"legend\" "
           "style=\"background:linear-gradient(to right,"
        << colour(-1, 1) << ",#fff," << colour(1, 1) << ")\"></span>harmful; full colour at |token score| "
        << format_score(scale) << ". Hover a token for its score.</p>\n";
  }
  out << "<section id=\"helpful\"><h2>" << helpful_heading << "</h2>\n";
  ranking_table(out, r, helpful, scale, "lowers");
  out << "</section>\n<section id=\"harmful\"><h2>" << harmful_heading << "</h2>\n";
  ranking_table(out, r, harmful, scale, "raises");
  out << "</section>\n<section id=\"histogram\"><h2>Scores of all " << r.examples.size() << " examples</h2>\n"
      << histogram_svg(r.examples) << "</section>\n";
  if (r.lds) lds_section(out, *r.lds);
  out << "<section id=\"config\"><h2>Configuration</h2><pre>" << html_escape(r.config_json) << "</pre></section>\n"
      << "</main></body></html>\n";
  return out.str();
}

void write_html_report(const std::string& path, const HtmlReport& report) {
  write_file_atomically(path, render_html_report(report));
}

}  // namespace magic
