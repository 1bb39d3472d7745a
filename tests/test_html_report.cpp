// The --html report: ranking order, escaping, which sections appear when, a
// self-contained page, and a real browser (headless Chromium) that loads it
// without console errors. Torch-free.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "lib/io/html_report.h"
#include "lib/io/safetensors.h"
#include "tests/support.h"

namespace magic {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";

HtmlExample example(const std::string& id, double score, const std::string& text = "some text") {
  HtmlExample ex;
  ex.id = id;
  ex.score = score;
  ex.text = text;
  return ex;
}

// Eight examples with distinct scores; helpful order d, b, f; harmful order c,
// g, a.
HtmlReport sample(int64_t top = 3) {
  HtmlReport r;
  r.title = "magic-run: sample";
  r.config_json = "{\n  \"steps\": 4\n}";
  r.timings = {{"training", 1.5}, {"REPLAY", 2.25}};
  r.facts = {{"query loss", "3.0665"}, {"examples", "8"}};
  r.top = top;
  const std::vector<std::pair<std::string, double>> scores = {{"a", 0.2},  {"b", -0.3}, {"c", 0.9}, {"d", -0.8},
                                                              {"e", 0.01}, {"f", -0.1}, {"g", 0.5}, {"h", 0.0}};
  for (const auto& [id, s] : scores) r.examples.push_back(example(id, s, "text of " + id));
  return r;
}

std::string section(const std::string& html, const std::string& id) {
  const size_t begin = html.find("<section id=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</section>", begin) - begin);
}

// data-id values in document order (still HTML-escaped).
std::vector<std::string> data_ids(const std::string& html) {
  std::vector<std::string> ids;
  const std::string key = "data-id=\"";
  for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
    const size_t begin = at + key.size();
    ids.push_back(html.substr(begin, html.find('"', begin) - begin));
  }
  return ids;
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(HtmlReport, RanksHelpfulMostNegativeFirstAndHarmfulMostPositiveFirst) {
  const std::string html = render_html_report(sample());
  EXPECT_EQ(data_ids(section(html, "helpful")), (std::vector<std::string>{"d", "b", "f"}));
  EXPECT_EQ(data_ids(section(html, "harmful")), (std::vector<std::string>{"c", "g", "a"}));
  EXPECT_NE(section(html, "helpful").find("-8.00e-01"), std::string::npos);
  EXPECT_NE(html.find("query loss"), std::string::npos);
  EXPECT_NE(html.find("2.25 s"), std::string::npos);
}

// Issue 43: with more rows asked for than examples of a sign, "Most helpful" listed harmful ones.
TEST(HtmlReport, ARankingHoldsOnlyItsOwnSignAndSaysWhenFewerHaveIt) {
  const std::string html = render_html_report(sample(100));
  EXPECT_EQ(data_ids(section(html, "helpful")), (std::vector<std::string>{"d", "b", "f"}));
  EXPECT_EQ(data_ids(section(html, "harmful")), (std::vector<std::string>{"c", "g", "a", "e"}));  // h is 0
  EXPECT_NE(section(html, "helpful")
                .find("<h2>Most helpful (most negative score; 3 of the 8 examples lower the query "
                      "loss)</h2>"),
            std::string::npos);
  EXPECT_NE(section(html, "harmful").find("; 4 of the 8 examples raise the query loss)</h2>"), std::string::npos);
  // As many of the sign as asked for: the heading has no count.
  EXPECT_NE(render_html_report(sample(3)).find("<h2>Most helpful (most negative score)</h2>"), std::string::npos);
  HtmlReport none = sample(3);
  for (HtmlExample& ex : none.examples) ex.score = std::abs(ex.score);
  const std::string all_harmful = section(render_html_report(none), "helpful");
  EXPECT_TRUE(data_ids(all_harmful).empty());
  EXPECT_NE(all_harmful.find("None of the 8 examples lowers the query loss."), std::string::npos) << all_harmful;
  EXPECT_TRUE(data_ids(render_html_report(sample(0))).empty());
}

TEST(HtmlReport, EscapesEveryText) {
  const std::string nasty = "<b>&\"x'";
  HtmlReport r = sample();
  r.title = nasty;
  r.config_json = nasty;
  r.facts.push_back({nasty, nasty});
  r.shown_query = nasty;
  r.examples[3].id = nasty;  // d: the most helpful
  r.examples[3].text = nasty;
  const std::string html = render_html_report(r);
  EXPECT_EQ(html.find(nasty), std::string::npos);
  EXPECT_EQ(html.find("&\"x'"), std::string::npos);
  const std::string escaped = "&lt;b&gt;&amp;&quot;x&#39;";
  EXPECT_EQ(data_ids(section(html, "helpful")).front(), escaped);
  EXPECT_GE(count(html, escaped), 7u);  // title twice, config, fact key and
                                        // value, shown query, id twice, text
}

// A byte that is not UTF-8 reads \xNN, as in the terminal's rows and scores.tsv.
TEST(HtmlReport, EscapeWritesInvalidUtf8AndControlCharactersAsTheirBytes) {
  EXPECT_EQ(html_escape("caf\xC3\xA9 \xE2\x82\xAC"),
            "caf\xC3\xA9 \xE2\x82\xAC");  // valid UTF-8 kept
  EXPECT_EQ(html_escape("a\xFFz"), "a\\xFFz");
  EXPECT_EQ(html_escape("\xC3"), "\\xC3");                    // cut short
  EXPECT_EQ(html_escape("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a surrogate
  EXPECT_EQ(html_escape(std::string("a\0b\tc\n", 6)), "a\\x00b\tc\n");
}

TEST(HtmlReport, NonFiniteScoresPrintAndNaNIsInNeitherRanking) {
  EXPECT_EQ(format_score(-1.524e-3), "-1.52e-03");
  EXPECT_EQ(format_score(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_score(-std::numeric_limits<double>::infinity()), "-inf");
  HtmlReport r = sample(8);
  r.examples[0].score = std::numeric_limits<double>::quiet_NaN();
  r.examples[1].score = std::numeric_limits<double>::infinity();
  r.timings.push_back({"broken", std::numeric_limits<double>::quiet_NaN()});
  r.lds = HtmlLds{};
  r.lds->mean = std::numeric_limits<double>::infinity();
  const std::string html = render_html_report(r);
  EXPECT_EQ(data_ids(section(html, "helpful")), (std::vector<std::string>{"d", "f"}));  // a is NaN, b +inf
  EXPECT_EQ(data_ids(section(html, "harmful")).front(), "b");
  for (const std::string& id : data_ids(section(html, "harmful"))) EXPECT_NE(id, "a");
  EXPECT_NE(html.find("nan s"), std::string::npos);
  EXPECT_NE(section(html, "histogram").find("2 non-finite scores not plotted"), std::string::npos);
}

TEST(HtmlReport, HistogramHasThirtyBinsTheRangeAndZero) {
  const std::string hist = section(render_html_report(sample()), "histogram");
  EXPECT_NE(hist.find("<svg"), std::string::npos);
  EXPECT_EQ(count(hist, "<rect"), 30u);
  EXPECT_NE(hist.find(">-8.00e-01</text>"), std::string::npos);
  EXPECT_NE(hist.find(">9.00e-01</text>"), std::string::npos);
  EXPECT_NE(hist.find("class=\"zero\""), std::string::npos);
  HtmlReport empty = sample();
  empty.examples.clear();
  EXPECT_NE(render_html_report(empty).find("No finite scores"), std::string::npos);
}

TEST(HtmlReport, HeatMapOnlyWithTokenScores) {
  HtmlReport r = sample();
  EXPECT_EQ(render_html_report(r).find("class=\"heat\""), std::string::npos);
  HtmlExample& d = r.examples[3];
  d.text = "h\xC3\xA9!";
  d.tokens = {"h", "\xC3", "\xA9", "!"};  // byte-level: the two bytes of e-acute join one span
  d.token_scores = {-0.5, -0.1, -0.2, 0.25};
  const std::string helpful = section(render_html_report(r), "helpful");
  EXPECT_EQ(count(helpful, "class=\"heat\""), 1u);
  EXPECT_EQ(count(helpful, "<span title="), 3u);
  EXPECT_NE(helpful.find("<span title=\"-3.00e-01 (2 tokens)\""), std::string::npos);
  EXPECT_NE(helpful.find("rgba(37,99,235,0.850)\">h</span>"),
            std::string::npos);  // the largest: full blue
  EXPECT_NE(helpful.find("rgba(220,38,38,0.425)\">!</span>"),
            std::string::npos);  // half of it, red
}

TEST(HtmlReport, HeatMapGreysTheUnscoredRestOfTheText) {
  HtmlReport r = sample();
  r.examples[3].text = "abcdef";
  r.examples[3].tokens = {"a", "b"};
  r.examples[3].token_scores = {-1, 1};
  EXPECT_NE(render_html_report(r).find("<span class=\"rest\" title=\"not scored\">cdef</span>"), std::string::npos);
}

TEST(HtmlReport, PerQueryColumnsOnlyWithQueryIds) {
  HtmlReport r = sample();
  EXPECT_EQ(render_html_report(r).find("<th class=\"q"), std::string::npos);
  r.query_ids = {"Ecc1:1", "Ecc2:2"};
  r.shown_query = "Ecc2:2";
  for (HtmlExample& ex : r.examples) ex.per_query = {ex.score / 2, ex.score};
  const std::string helpful = section(render_html_report(r), "helpful");
  EXPECT_EQ(count(helpful, "<th class=\"q"), 2u);
  EXPECT_NE(helpful.find("<th class=\"q shown\">Ecc2:2</th>"), std::string::npos);
  EXPECT_NE(helpful.find("-4.00e-01"), std::string::npos);  // d's first query
}

// The queries the scores are about, with the index --query takes; per-query runs say which query
// ranks; a non-smooth run's warning stands above the tables.
TEST(HtmlReport, ShowsTheQueriesTheRankedOneAndAWarning) {
  HtmlReport r = sample();
  std::string html = render_html_report(r);
  EXPECT_EQ(html.find("id=\"queries\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"ranking-note\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"warning\""), std::string::npos);
  r.queries = {{"Ecc1:1", "Vanity of <vanities>"}, {"Ecc2:2", "I said of laughter"}};
  r.shown_query = "Ecc2:2";
  r.ranking_note = "Ranked by query 1 (Ecc2:2: I said of laughter).";
  r.warning = "warning: training looks non-smooth: spikes & jumps";
  html = render_html_report(r);
  const std::string queries = section(html, "queries");
  EXPECT_NE(queries.find("<h2>Queries (2)</h2>"), std::string::npos) << queries;
  EXPECT_NE(queries.find("<td class=\"rank\">0</td><td class=\"id\">Ecc1:1</td><td class=\"text\">Vanity of "
                         "&lt;vanities&gt;</td>"),
            std::string::npos)
      << queries;
  EXPECT_NE(queries.find("<tr class=\"shown\"><td class=\"rank\">1</td>"), std::string::npos) << queries;
  EXPECT_NE(html.find("<p class=\"lede\" id=\"ranking-note\">Ranked by query 1 (Ecc2:2: I said of laughter).</p>"),
            std::string::npos);
  EXPECT_NE(html.find("id=\"warning\">warning: training looks non-smooth: spikes &amp; jumps</p>"), std::string::npos);
  EXPECT_LT(html.find("id=\"warning\""), html.find("id=\"helpful\""));
}

TEST(HtmlReport, LdsSectionOnlyWhenSet) {
  HtmlReport r = sample();
  EXPECT_EQ(render_html_report(r).find("id=\"lds\""), std::string::npos);
  r.lds = HtmlLds{0.412, 0.301, 0.522, 0.95, 100, 0.5, {"Ecc1:1", "Ecc2:2"}, {0.35, 0.474}};
  const std::string lds = section(render_html_report(r), "lds");
  for (const char* part : {"0.412", "95% interval", "0.301 to 0.522", ">100<", "0.500", "Ecc2:2", "0.474"}) {
    EXPECT_NE(lds.find(part), std::string::npos) << part;
  }
}

TEST(HtmlReport, IsSelfContained) {
  HtmlReport r = sample();
  r.examples[3].tokens = {"x"};
  r.examples[3].token_scores = {-1};
  r.lds = HtmlLds{};
  const std::string html = render_html_report(r);
  for (const char* external : {"http", "src=", "href=", "@import", "url(", "<link"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
}

TEST(HtmlReport, WritesTheRenderedPage) {
  const std::string path = ::testing::TempDir() + "/html-report-" + std::to_string(getpid()) + ".html";
  write_html_report(path, sample());
  EXPECT_EQ(read_all(path), render_html_report(sample()));
  std::filesystem::remove(path);
}

struct BrowserRun {
  int exit_code = -1;
  std::string dom;
  std::vector<std::string> console;  // console messages and uncaught exceptions
};

// Loads `html` from a file in headless Chromium. This Chromium logs every
// console message at INFO, whatever its level, so every CONSOLE line counts:
// the page has no script that should log.
BrowserRun load_in_chromium(const std::string& html, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/html-browser-" + std::to_string(getpid()) + "-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/page.html", std::ios::binary) << html;
  // --no-sandbox: the sandbox refuses to start as root and in most containers;
  // the page is our own.
  const std::string command = "timeout 60 " + std::string(kChromium) +
                              " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                              "--no-first-run"
                              " --disable-extensions --enable-logging=stderr --v=0 --user-data-dir='" +
                              dir + "/profile' --dump-dom 'file://" + dir + "/page.html' >'" + dir + "/dom.html' 2>'" +
                              dir + "/stderr.txt'";
  BrowserRun run;
  const int status = std::system(command.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.dom = read_all(dir + "/dom.html");
  std::istringstream log(read_all(dir + "/stderr.txt"));
  for (std::string line; std::getline(log, line);) {
    if (line.find("CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos) {
      run.console.push_back(line);
    }
  }
  std::filesystem::remove_all(dir);
  return run;
}

class HtmlReportBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* skip = std::getenv("MAGIC_NO_BROWSER");
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << "MAGIC_NO_BROWSER=1";
    ASSERT_TRUE(std::filesystem::exists(kChromium)) << kChromium
                                                    << " not found: run `bash scripts/install-deps.sh` (or set "
                                                       "MAGIC_NO_BROWSER=1 to skip)";
  }
};

TEST_F(HtmlReportBrowser, ShowsTheTopIdsWithoutConsoleErrors) {
  HtmlReport r = sample();
  r.examples[3].id = "Prv14:3 & co";
  r.examples[3].tokens = {"t", "e", "x", "t"};
  r.examples[3].token_scores = {-0.1, 0.2, -0.3, 0.4};
  r.lds = HtmlLds{0.4, 0.3, 0.5, 0.95, 10, 0.5, {"q"}, {0.4}};
  const auto start = std::chrono::steady_clock::now();
  const BrowserRun run = load_in_chromium(render_html_report(r), "ok");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(run.exit_code, 0) << "chromium failed (124: timed out)";
  EXPECT_TRUE(run.console.empty()) << run.console.front();
  EXPECT_EQ(data_ids(section(run.dom, "helpful")),
            (std::vector<std::string>{"Prv14:3 &amp; co", "b", "f"}));  // the DOM serializer escapes & too
  EXPECT_EQ(data_ids(section(run.dom, "harmful")), (std::vector<std::string>{"c", "g", "a"}));
  EXPECT_NE(run.dom.find("<svg"), std::string::npos);
  RecordProperty("chromium_seconds", std::to_string(seconds));
}

// The report magic-run writes (per-query, validated): its most helpful example for the shown query
// (the smallest score in scores.safetensors) is the first id of the rendered "helpful" table.
TEST_F(HtmlReportBrowser, MagicRunsReportShowsItsTopExample) {
  nlohmann::json j = testing::tiny_run_json({});
  j["data"]["train"] = testing::source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  j["training"]["weights"] = "per_token";
  const std::string config = ::testing::TempDir() + "/html-run.json", out = ::testing::TempDir() + "/html-run";
  std::filesystem::remove_all(out);
  std::ofstream(config) << j.dump();
  const auto o = testing::run_command(std::string(MAGIC_RUN_BINARY) + " --config " + config + " --out " + out +
                                      " --html --per-query --query 2 --validate lds --subsets 4 --drop-fraction 0.2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const SafetensorsFile scores = load_safetensors(out + "/scores.safetensors");
  const auto ids = nlohmann::json::parse(scores.metadata.at("example_ids"));
  const int64_t best = scores.tensors.at("scores")[2].sum(1).argmin().item<int64_t>();
  const BrowserRun run = load_in_chromium(read_all(out + "/report.html"), "magic-run");
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_TRUE(run.console.empty()) << run.console.front();
  const std::vector<std::string> helpful = data_ids(section(run.dom, "helpful"));
  ASSERT_FALSE(helpful.empty());
  EXPECT_EQ(helpful.front(), ids.at(best).get<std::string>());
  EXPECT_NE(section(run.dom, "lds").find("4"), std::string::npos);
  EXPECT_NE(run.dom.find("<span"), std::string::npos) << "per-token heat map";
}

TEST_F(HtmlReportBrowser, ConsoleCheckCatchesAPlantedError) {
  std::string html = render_html_report(sample());
  html.insert(html.rfind("</body>"), std::string("<script>throw new Error(") + "\"planted\")</script>");
  const BrowserRun run = load_in_chromium(html, "planted");
  ASSERT_EQ(run.exit_code, 0);
  ASSERT_FALSE(run.console.empty()) << "the planted error went unseen";
  EXPECT_NE(run.console.front().find("planted"), std::string::npos) << run.console.front();
}

}  // namespace
}  // namespace magic
