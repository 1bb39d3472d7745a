// The examples in README.md and docs/ are real: every fenced block that begins with
// "$ build/tools/magic-check" is run, and every line it shows (except "..." cuts and the wall
// time) must appear in the real output, with the exit code the summary line implies (PASS 0,
// FAIL 1); every block that begins with "$ build/tools/magic-run" is run from the source folder
// (its --out in a temporary folder) and every line it shows that holds no duration must appear;
// every ```json block parses, and every run config among them loads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "lib/core/strings.h"
#include "lib/train/run_config.h"
#include "tests/support.h"

namespace magic {
namespace {

struct Example {
  std::string command;              // as printed, after "$ "
  std::vector<std::string> output;  // the lines shown below it
};

std::vector<Example> readme_examples() {
  std::istringstream readme(testing::read_file(std::string(MAGIC_SOURCE_DIR) + "/README.md"));
  std::vector<Example> examples;
  bool in_block = false, in_example = false;
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      in_example = false;
      continue;
    }
    if (!in_block) continue;
    if (line.rfind("$ build/tools/", 0) == 0) {
      examples.push_back({line.substr(2), {}});
      in_example = true;
    } else if (in_example) {
      examples.back().output.push_back(line);
    }
  }
  return examples;
}

bool shown_as_is(const std::string& line) {
  if (line.empty() || line.rfind("...", 0) == 0) return false;
  return !(line.front() == '(' && line.size() > 3 && line.substr(line.size() - 3) == " s)");  // "(1.7 s)"
}

// Figures at the rounding level of fp64 (a worst relative error of 2e-16 or 5e-16) depend on the
// machine's kernels (AVX2 or AVX-512, the BLAS's blocking): a line matches a printed one when every
// word is the same, or both words are numbers below 1e-13 in magnitude.
bool rounding_level(const std::string& word) {
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  return end != word.c_str() && *end == '\0' && word.find_first_of("eE") != std::string::npos && std::abs(v) < 1e-13;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool printed(const std::string& shown, const std::string& output) {
  const std::vector<std::string> want = words(shown);
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line == shown) return true;
    const std::vector<std::string> got = words(line);
    if (got.size() != want.size()) continue;
    bool same = true;
    for (size_t i = 0; same && i < got.size(); ++i) {
      same = got[i] == want[i] || (rounding_level(got[i]) && rounding_level(want[i]));
    }
    if (same) return true;
  }
  return false;
}

TEST(Readme, ALineMatchesAPrintedOneOnlyUpToRoundingLevelFigures) {
  const std::string shown = "grad         head.weight    1.000000   1.000000        3.5e-16        1.000000   pass";
  EXPECT_TRUE(printed(shown, "x\ngrad head.weight 1.000000 1.000000 4.7e-16 1.000000 pass\n"));
  EXPECT_FALSE(printed(shown, "grad head.weight 1.000000 1.000000 2.0e-13 1.000000 pass\n"));  // not rounding
  EXPECT_FALSE(printed(shown, "grad head.weight 1.000001 1.000000 3.5e-16 1.000000 pass\n"));  // a ratio moved
  EXPECT_FALSE(printed(shown, "grad head.weight 1.000000 1.000000 3.5e-16 1.000000 FAIL\n"));
  EXPECT_FALSE(printed(shown, "grad tok_emb 1.000000 1.000000 3.5e-16 1.000000 pass\n"));
}

std::vector<Example> examples_of(const std::string& tool) {
  std::vector<Example> out;
  for (const Example& e : readme_examples()) {
    if (e.command.rfind("build/tools/" + tool + " ", 0) == 0) out.push_back(e);
  }
  return out;
}

TEST(Readme, EveryExampleIsOfAToolTheseTestsRun) {
  for (const Example& e : readme_examples()) {
    EXPECT_TRUE(e.command.rfind("build/tools/magic-check ", 0) == 0 ||
                e.command.rfind("build/tools/magic-run ", 0) == 0)
        << e.command;
  }
}

TEST(Readme, EveryMagicCheckExampleRunsAsPrinted) {
  const std::vector<Example> examples = examples_of("magic-check");
  ASSERT_GE(examples.size(), 3u) << "the README's magic-check examples were not found";
  for (const Example& e : examples) {
    SCOPED_TRACE(e.command);
    const auto o = testing::run_command(std::string(MAGIC_CHECK_BINARY) +
                                        e.command.substr(std::string("build/tools/magic-check").size()));
    int compared = 0, expected_code = -1;
    for (const std::string& line : e.output) {
      if (line.rfind("PASS: ", 0) == 0) expected_code = 0;
      if (line.rfind("FAIL: ", 0) == 0) expected_code = 1;
      if (!shown_as_is(line)) continue;
      ++compared;
      EXPECT_TRUE(printed(line, o.output)) << "README shows a line the run does not print:\n"
                                           << line << "\n--- the run printed:\n"
                                           << o.output;
    }
    EXPECT_GE(compared, 10) << "too few lines compared";
    EXPECT_EQ(o.exit_code, expected_code) << o.output;
  }
}

// A line of magic-run's output that holds a duration ("in 3.0s", "2.5 steps/s", "ETA 7.5s",
// "training 2.98 s") differs from run to run: the README shows it, the test does not compare it.
bool holds_a_duration(const std::string& line) {
  static const std::regex duration("[0-9.]+ ?s\\b|steps/s|ETA ");
  return std::regex_search(line, duration);
}

TEST(Readme, TheAttributionDemoRunsAsPrinted) {
  const std::vector<Example> examples = examples_of("magic-run");
  ASSERT_EQ(examples.size(), 1u) << "the README's magic-run demo was not found";
  const Example& e = examples.front();
  SCOPED_TRACE(e.command);
  const std::string shown_out = "out/demo";
  const size_t at = e.command.find(" --out " + shown_out);
  ASSERT_NE(at, std::string::npos) << "the demo writes to " << shown_out;
  const std::string out = testing::fresh_dir("readme-demo");
  std::string args = e.command.substr(std::string("build/tools/magic-run").size());
  args.replace(args.find(" --out " + shown_out), 7 + shown_out.size(), " --out " + out);
  const auto o = testing::run_command(str_cat("cd ", MAGIC_SOURCE_DIR, " && ", MAGIC_RUN_BINARY, args));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::string output = o.output;  // the temporary folder as the README names it
  for (size_t p = output.find(out); p != std::string::npos; p = output.find(out, p)) {
    output.replace(p, out.size(), shown_out);
  }
  int compared = 0;
  for (const std::string& line : e.output) {
    if (!shown_as_is(line) || holds_a_duration(line)) continue;
    ++compared;
    EXPECT_TRUE(printed(line, output)) << "README shows a line the run does not print:\n"
                                       << line << "\n--- the run printed:\n"
                                       << output;
  }
  EXPECT_GE(compared, 20) << "too few lines compared";
  std::filesystem::remove_all(out);
}

TEST(Readme, ADurationIsNotCompared) {
  EXPECT_TRUE(holds_a_duration("training: 32 steps in 3.0s (10.7 steps/s)"));
  EXPECT_TRUE(holds_a_duration("REPLAY: 13/32 steps (40%), 2.5 steps/s, ETA 7.5s"));
  EXPECT_TRUE(holds_a_duration("query loss 4.2707; training 2.98 s, REPLAY 11.88 s; 8 checkpoints (3.09 MiB)"));
  EXPECT_FALSE(
      holds_a_duration("magic-run: 376 examples ... estimated peak memory 545.7 MiB (13 states of 395.2 KiB)"));
  EXPECT_FALSE(holds_a_duration("  -4.446e-04  Prv17:20  He that hath a froward heart findeth no good"));
}

// The ```json blocks of a markdown file, each with the line it starts on.
std::vector<std::pair<int, std::string>> json_blocks(const std::string& path) {
  std::istringstream text(testing::read_file(path));
  std::vector<std::pair<int, std::string>> blocks;
  bool in_json = false;
  int number = 0;
  for (std::string line; std::getline(text, line);) {
    ++number;
    if (!in_json && line == "```json") {
      in_json = true;
      blocks.emplace_back(number, "");
    } else if (in_json && line.rfind("```", 0) == 0) {
      in_json = false;
    } else if (in_json) {
      blocks.back().second += line + "\n";
    }
  }
  return blocks;
}

TEST(Readme, EveryJsonExampleParsesAndEveryConfigExampleLoads) {
  const std::string source = MAGIC_SOURCE_DIR;
  const nlohmann::json demo = nlohmann::json::parse(testing::read_file(source + "/fixtures/runs/demo.json"));
  int blocks = 0, configs = 0;
  const nlohmann::json multimodal =
      nlohmann::json::parse(testing::read_file(source + "/fixtures/runs/multimodal.json"));
  bool demo_shown = false, multimodal_shown = false;
  std::vector<std::string> files{source + "/README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(source + "/docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path().string());
  }
  for (const std::string& file : files) {
    for (const auto& [line, text] : json_blocks(file)) {
      SCOPED_TRACE(str_cat(file, ":", line));
      ++blocks;
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
      // A document that names its format (a plan's plan.json, a dump's manifest) is not a run config.
      if (!(j.is_object() && j.contains("model") && j.contains("data") && j.contains("training")) ||
          j.contains("format")) {
        continue;
      }
      ++configs;
      // Data paths are relative to the config's folder: the examples are written for fixtures/runs.
      EXPECT_NO_THROW(RunConfig::from_json(j, "example", source + "/fixtures/runs")) << text;
      demo_shown = demo_shown || j == demo;
      multimodal_shown = multimodal_shown || j == multimodal;
    }
  }
  EXPECT_GE(blocks, 5);
  EXPECT_GE(configs, 2);
  EXPECT_TRUE(demo_shown) << "docs/magic-run.md shows fixtures/runs/demo.json: they differ";
  EXPECT_TRUE(multimodal_shown) << "docs/magic-run.md shows fixtures/runs/multimodal.json: they differ";
}

}  // namespace
}  // namespace magic
