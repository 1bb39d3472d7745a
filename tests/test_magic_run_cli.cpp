// magic-run end to end as a user runs it: bad inputs exit 2 with a message naming the input;
// a good run writes its score files and nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "lib/core/utf8.h"
#include "lib/data/text_loader.h"
#include "lib/io/safetensors.h"
#include "tests/support.h"
#include "tests/tool_refusals.h"

namespace magic {
namespace {

using Outcome = testing::CommandOutcome;

Outcome run_magic_run(const std::string& args) {
  return testing::run_command(std::string(MAGIC_RUN_BINARY) + " " + args);
}

// Writes a config derived from the tiny test run with `edit` applied.
std::string config_with(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  return testing::write_tiny_run_config(name, {}, edit);
}

void expect_bad_input(const std::string& args, const std::string& fragment) {
  Outcome o = run_magic_run(args);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n" << o.output;
}

TEST(MagicRunCli, BadInputsExitTwoWithAClearMessage) {
  expect_bad_input("--config /nonexistent.json", "/nonexistent.json: cannot open JSON file");
  expect_bad_input("--config x.json --bogus-flag", "bogus-flag");
  expect_bad_input("--config " + config_with("few", [](nlohmann::json& j) { j["training"]["batch_size"] = 5000; }),
                   "too few examples for one batch");
  expect_bad_input("--config " + config_with("len", [](nlohmann::json& j) { j["model"]["max_len"] = 1; }),
                   "max_len: expected >= 2");
  expect_bad_input("--config " + config_with("heads", [](nlohmann::json& j) { j["model"]["n_heads"] = 3; }),
                   "d_model 8 must be divisible by n_heads 3");
  expect_bad_input("--config " + config_with("opt", [](nlohmann::json& j) { j["optimizer"]["name"] = "lion"; }),
                   "unknown optimizer 'lion'; expected one of sgd, adam, adamw");
  expect_bad_input("--config " + config_with("sched",
                                             [](nlohmann::json& j) {
                                               j["optimizer"]["schedule"] = {{"name", "step"}};
                                             }),
                   "unknown schedule 'step'");
  expect_bad_input("--config " + config_with("type", [](nlohmann::json& j) { j["training"]["steps"] = "ten"; }),
                   "training.steps: expected an integer, got string");
  expect_bad_input("--config " + config_with("ckpt", [](nlohmann::json& j) { j["training"]["checkpoints"] = "half"; }),
                   "unknown checkpoint schedule 'half'");
  const std::string bad_jsonl = ::testing::TempDir() + "/broken.jsonl";
  std::ofstream(bad_jsonl) << "{\"id\": 1, \"text\": \"fine\"}\n{\"id\": 2, \"text\": \"fine\"}\n{not json}\n";
  expect_bad_input("--config " + config_with("jsonl", [&](nlohmann::json& j) { j["data"]["train"] = bad_jsonl; }),
                   "broken.jsonl:3: malformed JSON line");
  // A pasted example with a comment: file, line and column, not the parser's raw text.
  const std::string commented = ::testing::TempDir() + "/commented.json";
  std::ofstream(commented) << "{\n  \"training\": {\n    // steps\n    \"steps\": 4\n  }\n}\n";
  expect_bad_input("--config " + commented, commented + ": invalid JSON at line 3, column 5");
  // Directories where files belong.
  const std::string folder = ::testing::TempDir() + "/a-folder";
  std::filesystem::create_directories(folder);
  expect_bad_input("--config " + folder, folder + ": is a directory, expected a JSON file");
  expect_bad_input("--config " + config_with("dirdata", [&](nlohmann::json& j) { j["data"]["train"] = folder; }),
                   folder + ": is a directory, expected a data file");
}

// Flags and the output directory are checked before the config is even loaded: each exits 2 at
// once, naming the flag, with nothing trained and nothing created.
// Judged in-process (each program start costs a second of LibTorch loading); the exit paths
// themselves, and the refusals that need the config, are BadFlagsExitTwoBeforeTraining's.
TEST(MagicRunCli, BadFlagsAreRefusedNamingTheFlag) {
  const std::string config = config_with("flags", [](nlohmann::json&) {});
  const std::string file = ::testing::TempDir() + "/not-a-directory";
  std::ofstream(file) << "x";
  const auto refusal = [&](const std::string& args) {
    return testing::magic_run_refusal("--config " + config + " " + args);
  };
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--query 1", "--query 1: needs --per-query"},
           {"--per-query --query -1", "--query -1: expected an index >= 0"},
           {"--query-batch 2", "--query-batch 2: needs --per-query"},
           {"--per-query --query-batch 0", "--query-batch 0: expected a count >= 1"},
           {"--retrace-per-query", "--retrace-per-query: needs --per-query"},
           {"--out " + file, "--out " + file + ": is a file; expected a directory"},
           {"--out " + file + "/scores", "is a file; cannot create a directory under it"},
           // Writable to access() for root, but nothing can be made there.
           {"--out /proc/magic-out", "--out /proc/magic-out: cannot create it in /proc"},
           {"--validate shapley", "--validate shapley: expected lds"},
           {"--validate lds --subsets 1", "--subsets 1: expected at least 2 subsets"},
           {"--validate lds --drop-fraction 1.5", "--drop-fraction 1.5: expected a fraction in (0, 1)"},
           {"--subsets 8", "--subsets and --drop-fraction: need --validate lds"},
           {"--html", "--html: needs --out"},
           {"--topology dp=0", "dp=0"},
           {"--topology dp=2 --launch ssh", "--launch ssh: expected spawn or env"},
       }) {
    const std::string refused = refusal(args);
    EXPECT_NE(refused.find(fragment), std::string::npos) << args << "\n" << refused;
  }
  EXPECT_EQ(refusal("--top 3"), "(accepted)");  // the in-process judge accepts good flags
}

// Through the program: a flag, and the refusals that need the config (its device, the backend's
// device), each exit 2 naming the input before anything trains.
TEST(MagicRunCli, BadFlagsExitTwoBeforeTraining) {
  const std::string config = config_with("flags", [](nlohmann::json&) {});
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--top -3", "--top -3: expected a count >= 0"},
           {"--device tpu", "--device=tpu: unknown device 'tpu'; expected cpu or cuda"},
           {"--topology dp=2 --backend nccl", "--backend nccl: NCCL moves GPU memory, and the run's device is cpu"},
#ifndef MAGIC_WITH_CUDA
           {"--device cuda", "this build has no CUDA (configure against a CUDA LibTorch: docs/gpu.md)"},
#endif
       }) {
    Outcome o = run_magic_run("--config " + config + " " + args);
    EXPECT_EQ(o.exit_code, 2) << args << "\n" << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
    EXPECT_EQ(o.output.find("examples from"), std::string::npos) << "trained despite " << args;
  }
}

// A run that cannot fit in memory is refused before anything is built, with the estimate, what is
// available and the keys that change it (a billion-step config used to grow to 24 GB first).
TEST(MagicRunCli, ARunThatCannotFitIsRefusedWithTheFigures) {
  const std::string config = config_with("huge", [](nlohmann::json& j) { j["training"]["steps"] = 1000000000000; });
  Outcome o = run_magic_run("--config " + config);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("training.steps 1000000000000 with sqrt checkpoints needs about "), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find(" available; lower training.steps"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("examples from"), std::string::npos) << o.output;
}

// A run whose training diverges stops at the first non-finite value with exit 1, naming the step
// and the tensor, and writes no score files.
TEST(MagicRunCli, ADivergentRunStopsNamingTheStepAndWritesNothing) {
  const std::string out = ::testing::TempDir() + "/magic-run-divergent";
  std::filesystem::remove_all(out);
  const std::string config = config_with("divergent", [](nlohmann::json& j) {
    j["optimizer"] = {{"name", "sgd"}, {"lr", 1e300}};
  });
  Outcome o = run_magic_run("--config " + config + " --out " + out);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("magic-run: stopped: training step "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(" is not finite ("), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("no scores written"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/scores.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out + "/scores.tsv"));
}

// The rows under the heading that starts with `title`: the heading line and each row's score.
std::pair<std::string, std::vector<double>> ranking(const std::string& output, const std::string& title) {
  std::istringstream in(output.substr(output.find("\n" + title) + 1));
  std::string heading, line;
  std::getline(in, heading);
  std::vector<double> scores;
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) scores.push_back(std::stod(line));
  return {heading, scores};
}

// Issue 43: with three examples and --top 3, "Most helpful" listed a positive (harmful) score.
// A ranking holds only the examples of its own sign and says how many have it when fewer than --top.
TEST(MagicRunCli, ARankingHoldsOnlyItsOwnSignAndSaysWhenFewerExamplesHaveIt) {
  testing::TinyRun tiny;
  tiny.documents = 3;
  tiny.max_len = 256;  // each verse one example
  tiny.batch_size = 2;
  const std::string out = testing::fresh_dir("magic-run-three");
  Outcome o = run_magic_run("--config " + testing::write_tiny_run_config("three", tiny) + " --out " + out + " --top 3");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const at::Tensor s = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
  ASSERT_EQ(s.numel(), 3);
  const int64_t negative = (s < 0).sum().item<int64_t>(), positive = (s > 0).sum().item<int64_t>();
  // Three examples, three rows asked for: at least one of the two signs has fewer than three.
  ASSERT_TRUE(negative < 3 || positive < 3);
  for (const auto& [title, sign, effect, count] :
       {std::tuple<std::string, double, std::string, int64_t>{"Most helpful", -1, "lower", negative},
        std::tuple<std::string, double, std::string, int64_t>{"Most harmful", 1, "raise", positive}}) {
    const auto [heading, scores] = ranking(o.output, title);
    EXPECT_EQ(static_cast<int64_t>(scores.size()), count) << o.output;
    for (double v : scores) EXPECT_GT(v * sign, 0) << title << ": " << v << "\n" << o.output;
    const std::string most = title + (sign < 0 ? " (most negative score" : " (most positive score");
    if (count == 0) {
      EXPECT_EQ(heading, most + "): none of the 3 examples " + effect + "s the query loss") << o.output;
    } else if (count < 3) {
      EXPECT_EQ(heading, most + "; " + std::to_string(count) + " of the 3 examples " + effect + " the query loss):")
          << o.output;
    } else {
      EXPECT_EQ(heading, most + "):") << o.output;
    }
  }
  std::filesystem::remove_all(out);
}

TEST(MagicRunCli, AGoodRunPrintsRankedExamplesAndWritesScoreFiles) {
  const std::string out = ::testing::TempDir() + "/magic-run-out";
  std::filesystem::remove_all(out);
  Outcome o = run_magic_run("--config " + config_with("good", [](nlohmann::json&) {}) + " --out " + out + " --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("estimated time: training about "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("training: 6 steps in "), std::string::npos) << o.output;  // progress summaries
  EXPECT_NE(o.output.find("REPLAY: 6 steps in "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("Most helpful"), std::string::npos);
  EXPECT_NE(o.output.find("Most harmful"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/scores.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(out + "/scores.tsv"));
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path();
  }
}

// The time estimate counts --validate lds's retrainings (the subsets and the baseline), and a
// per-query REPLAY's progress says its steps are queries x steps.
TEST(MagicRunCli, TheEstimateCountsLdsAndPerQueryProgressSaysWhatItCounts) {
  Outcome o = run_magic_run("--config " + config_with("lds-estimate", [](nlohmann::json&) {}) +
                            " --per-query --top 0 --validate lds --subsets 2 --drop-fraction 0.2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const size_t line = o.output.find("estimated time: training about ");
  ASSERT_NE(line, std::string::npos) << o.output;
  const std::string estimate = o.output.substr(line, o.output.find('\n', line) - line);
  EXPECT_NE(estimate.find(", LDS about "), std::string::npos) << estimate;
  EXPECT_NE(estimate.find(" for 3 retrainings (calibration: "), std::string::npos) << estimate;
  EXPECT_NE(o.output.find("REPLAY: 48 steps (of 8 queries x 6 steps) in "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("LDS: 3 retrainings in "), std::string::npos) << o.output;
}

// fp16 on the CPU (ops without fp16 kernels run widened), scores written in the master dtype;
// a bad policy exits 2 naming the field.
TEST(MagicRunCli, Fp16RunsOnTheCpuAndWritesFp32Scores) {
  const std::string out = ::testing::TempDir() + "/magic-run-fp16";
  std::filesystem::remove_all(out);
  // The config's top-level keys are set on the command line by their own names, as --dtype and --seed.
  Outcome o = run_magic_run("--config " + config_with("fp16", [](nlohmann::json&) {}) +
                            " --dtype fp16 --seed 3 --out " + out + " --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("sqrt checkpoints, fp16"), std::string::npos) << o.output;
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(out + "/run.json"))["seed"], 3);
  const at::Tensor scores = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
  EXPECT_EQ(scores.scalar_type(), c10::kFloat);
  EXPECT_TRUE(scores.isfinite().all().item<bool>());
  expect_bad_input("--config " + config_with("policy",
                                             [](nlohmann::json& j) {
                                               j["dtype"] = {{"compute", "bf16"}, {"master", "bf16"}};
                                             }),
                   "dtype: master dtype bf16");
}

// A row's text as magic-run cuts it: 90 bytes, "..." marking the cut.
std::string row_text(const std::string& text, size_t width = 90) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

std::vector<TextDocument> fixture(const std::string& name) {
  return load_jsonl(testing::source_path("fixtures/text/" + name));
}

// The summary says how documents became examples and shows every query's text; each chunk row
// (terminal and scores.tsv) shows its own chunk, not the whole document.
TEST(MagicRunCli, ShowsTheQueriesAndEachChunksOwnText) {
  const std::string out = ::testing::TempDir() + "/magic-run-chunks";
  std::filesystem::remove_all(out);
  Outcome o = run_magic_run("--config " + config_with("chunks", [](nlohmann::json&) {}) + " --out " + out + " --top 3");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // The tiny run: the first 6 verses, each longer than max_len 24, so every one is cut.
  EXPECT_NE(o.output.find("examples from " + testing::source_path("fixtures/text/proverbs.jsonl") +
                          " (6 documents, 6 split into chunks of max_len 24), 8 queries"),
            std::string::npos)
      << o.output;
  const std::vector<TextDocument> queries = fixture("queries.jsonl");
  EXPECT_NE(o.output.find("\nQueries (8, from " + testing::source_path("fixtures/text/queries.jsonl") + "):\n"),
            std::string::npos)
      << o.output;
  for (size_t q = 0; q < queries.size(); ++q) {
    const std::string line =
        "\n  " + std::to_string(q) + "  " + queries[q].id + "  " + row_text(queries[q].text) + "\n";
    EXPECT_NE(o.output.find(line), std::string::npos) << line << "\nin:\n" << o.output;
  }
  // Every row of scores.tsv: chunk k of a document holds bytes [24k, 24k + 24) of its text.
  std::map<std::string, std::string> texts;
  for (const TextDocument& d : fixture("proverbs.jsonl")) texts[d.id] = d.text;
  std::istringstream tsv(testing::read_file(out + "/scores.tsv"));
  std::string line;
  std::getline(tsv, line);  // header
  int64_t chunks = 0;
  std::map<std::string, std::string> chunk_text;
  while (std::getline(tsv, line)) {
    const std::string id = line.substr(0, line.find('\t')), text = line.substr(line.rfind('\t') + 1);
    const size_t hash = id.find('#');
    ASSERT_NE(hash, std::string::npos) << line;
    const size_t k = std::stoul(id.substr(hash + 1));
    const std::string& document = texts.at(id.substr(0, hash));
    EXPECT_EQ(text, document.substr(24 * k, 24)) << id;
    chunk_text[id] = text;
    ++chunks;
  }
  EXPECT_GT(chunks, 6);
  // The terminal rows show the same chunk texts.
  int64_t rows = 0;
  for (const auto& [id, text] : chunk_text) {
    if (o.output.find("  " + id + "  " + text + "\n") != std::string::npos) ++rows;
  }
  EXPECT_EQ(rows, 6) << o.output;  // --top 3, helpful and harmful
}

// A prompt/completion run shows both parts of every query and example, the arrow where the
// completion begins and no doubled space; scores.tsv has the parts in two columns; the report's
// Run table names the model, the data format and the dtype.
TEST(MagicRunCli, APromptCompletionRunShowsBothPartsEverywhere) {
  const std::string out = ::testing::TempDir() + "/magic-run-pairs";
  std::filesystem::remove_all(out);
  const std::string pairs = testing::source_path("fixtures/text/qa_pairs.jsonl");
  const std::string config = config_with("pairs-text", [&](nlohmann::json& j) {
    j["model"]["max_len"] = 96;  // every pair (at most 83 bytes) in one row
    j["data"] = {{"train", pairs}, {"queries", {{"slice", {0, 4}}}}, {"format", "prompt_completion"}};
  });
  Outcome o = run_magic_run("--config " + config + " --out " + out + " --html --top 3");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string arrow = "\xE2\x87\x92";  // ⇒
  // qa00 in the fixture: "Question: What does a wise son make?\nAnswer:" and " A glad father."
  EXPECT_NE(o.output.find("\n  0  qa00  Question: What does a wise son make?\\nAnswer: " + arrow + " A glad father.\n"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("qa00   "), std::string::npos) << "a doubled space:\n" << o.output;
  // Every ranked row (3 helpful, 3 harmful) shows its prompt, the arrow and its completion.
  const size_t rows_from = o.output.find("Most helpful");
  ASSERT_NE(rows_from, std::string::npos) << o.output;
  std::istringstream rows(o.output.substr(rows_from));
  int64_t shown = 0;
  for (std::string line; std::getline(rows, line);) {
    if (line.rfind("  ", 0) != 0) continue;
    EXPECT_NE(line.find("  Question: "), std::string::npos) << line;
    EXPECT_NE(line.find("\\nAnswer: " + arrow + " "), std::string::npos) << line;
    ++shown;
  }
  EXPECT_EQ(shown, 6) << o.output;
  // scores.tsv: prompt and completion in their own columns, each exactly the document's.
  std::map<std::string, TextDocument> documents;
  for (const TextDocument& d : load_jsonl(pairs, {"completion", "id", "prompt"})) documents[d.id] = d;
  std::istringstream tsv(testing::read_file(out + "/scores.tsv"));
  std::string line;
  std::getline(tsv, line);
  EXPECT_EQ(line, "id\tscore\tprompt\ttext");
  int64_t examples = 0;
  while (std::getline(tsv, line)) {
    const std::vector<std::string> fields = [&] {
      std::vector<std::string> f;
      std::istringstream in(line);
      for (std::string field; std::getline(in, field, '\t');) f.push_back(field);
      return f;
    }();
    ASSERT_EQ(fields.size(), 4u) << line;
    const TextDocument& d = documents.at(fields[0]);
    EXPECT_EQ(fields[2], one_line_text(d.prompt, true)) << line;
    EXPECT_EQ(fields[3], one_line_text(d.text, true)) << line;
    ++examples;
  }
  EXPECT_EQ(examples, 20);  // the 24 pairs less the 4 queries
  const std::string html = testing::read_file(out + "/report.html");
  EXPECT_NE(html.find("<tr><th>model</th><td>GPT from the config (1 layer, d_model 8, 2 heads, vocab 257, learned "
                      "positions, sequences of 96)</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><th>data format</th><td>prompt_completion (fields prompt, completion), fit chunk</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><th>dtype</th><td>fp64</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("Question: What does a wise son make?\nAnswer: " + arrow + " A glad father."), std::string::npos);
  std::filesystem::remove_all(out);
}

// --per-query without --query ranks by query 0 and says so, how to pick another, and where all
// the queries' scores are; the report says the same and lists the queries.
TEST(MagicRunCli, PerQuerySaysWhichQueryTheRankingIsFor) {
  const std::string out = ::testing::TempDir() + "/magic-run-per-query";
  std::filesystem::remove_all(out);
  const std::string config = config_with("per-query", [](nlohmann::json&) {});
  const std::vector<TextDocument> queries = fixture("queries.jsonl");
  Outcome o = run_magic_run("--config " + config + " --per-query --out " + out + " --html --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string note = "Ranked by query 0 (" + queries[0].id + ": " + row_text(queries[0].text, 40) +
                           "), the first of 8 (no --query given); --query N (0 to 7) picks another; " + out +
                           "/scores.safetensors holds all 8.";
  EXPECT_NE(o.output.find("lowers the loss on " + queries[0].id + ".\n" + note + "\nMost helpful"), std::string::npos)
      << note << "\nin:\n"
      << o.output;
  const std::string html = testing::read_file(out + "/report.html");
  EXPECT_NE(html.find("id=\"ranking-note\">Ranked by query 0 ("), std::string::npos);
  EXPECT_NE(html.find("<section id=\"queries\"><h2>Queries (8)</h2>"), std::string::npos);
  for (const TextDocument& q : queries) EXPECT_NE(html.find(">" + q.id + "</td>"), std::string::npos) << q.id;

  o = run_magic_run("--config " + config + " --per-query --query 3 --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("Ranked by query 3 (" + queries[3].id + ": " + row_text(queries[3].text, 40) +
                          "); --query N (0 to 7) picks another; --out DIR writes all 8 queries' scores.\n"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("no --query given"), std::string::npos) << o.output;
}

// A chaotic run (SGD at a rate far too high) warns once, naming the steps and pointing to
// --validate lds; a run with the demo's settings, scaled down, says nothing.
TEST(MagicRunCli, WarnsWhenTrainingLooksNonSmooth) {
  const auto small = [](nlohmann::json& j) {
    j["model"]["max_len"] = 64;
    j["data"]["max_documents"] = 96;
    j["training"]["steps"] = 12;
    j["training"]["batch_size"] = 32;
  };
  const std::string smooth = config_with("smooth", [&](nlohmann::json& j) {
    small(j);
    j["optimizer"] = {{"name", "adamw"},
                      {"lr", 0.003},
                      {"weight_decay", 0.01},
                      {"schedule", {{"name", "cosine"}, {"warmup_fraction", 0.25}}}};
  });
  Outcome o = run_magic_run("--config " + smooth + " --top 1");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output.find("non-smooth"), std::string::npos) << o.output;

  const std::string chaotic = config_with("chaotic", [&](nlohmann::json& j) {
    small(j);
    j["optimizer"] = {{"name", "sgd"}, {"lr", 2.0}};  // the loss reaches 26 by step 12, scores 1e5
  });
  o = run_magic_run("--config " + chaotic + " --top 1");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const size_t at = o.output.find("magic-run: warning: training looks non-smooth: ");
  ASSERT_NE(at, std::string::npos) << o.output;
  const std::string warning = o.output.substr(at, o.output.find('\n', at) - at);
  // Both signs show: the loss climbs from 4.1 to 26 and the last steps lurch 10-140x further.
  EXPECT_NE(warning.find("the training loss spiked above 1.5x its lowest so far at steps "), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("the update norm per unit learning rate jumped above 10x its median so far at step"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find(" of 12 (worst "), std::string::npos) << warning;  // names the steps
  EXPECT_NE(warning.find("; first-order scores may not predict retraining; check them with --validate lds"),
            std::string::npos)
      << warning;
  EXPECT_EQ(o.output.find("non-smooth", at + warning.size()), std::string::npos) << "warned twice:\n" << o.output;
  EXPECT_LT(at, o.output.find("REPLAY: 12 steps in ")) << "the warning comes when training ends:\n" << o.output;
}

}  // namespace
}  // namespace magic
