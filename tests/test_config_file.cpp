// Run configs in YAML and dotted command-line overrides (lib/core/config_file.h), and run.json,
// the record magic-run writes beside its scores.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/core/config_file.h"
#include "lib/core/json_fields.h"
#include "lib/core/nearest_word.h"
#include "lib/core/value_sources.h"
#include "lib/train/run_config.h"
#include "tests/support.h"

namespace magic {
namespace {

using nlohmann::json;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigFile, AYamlConfigReadsAsItsJsonTwin) {
  const json yaml = read_config_file(testing::source_path("fixtures/runs/plan_small.yaml"));
  const json twin = read_json_file(testing::source_path("fixtures/runs/plan_small.json"));
  EXPECT_EQ(yaml, twin) << yaml.dump(1);
  EXPECT_TRUE(yaml["optimizer"]["eps"].is_number_float());
  EXPECT_TRUE(yaml["training"]["steps"].is_number_integer());
}

TEST(ConfigFile, PlainScalarsAreTypedAndQuotedOnesStayText) {
  const json j = read_config_file(write_temp("scalars.yaml",
                                             "a: 64\nb: \"64\"\nc: true\nd: ~\ne: 3.5e-4\nf: fp64\ng: 'yes'\nh: yes\n"
                                             "i: 0x10\nj: [1, two]\n"));
  EXPECT_EQ(j["a"], 64);
  EXPECT_EQ(j["b"], "64");
  EXPECT_EQ(j["c"], true);
  EXPECT_TRUE(j["d"].is_null());
  EXPECT_DOUBLE_EQ(j["e"].get<double>(), 3.5e-4);
  EXPECT_EQ(j["f"], "fp64");
  EXPECT_EQ(j["g"], "yes");
  EXPECT_EQ(j["h"], "yes") << "YAML 1.2: yes is text";
  EXPECT_EQ(j["i"], "0x10");
  EXPECT_EQ(j["j"], json::array({1, "two"}));
}

TEST(ConfigFile, ABrokenOrAmbiguousYamlFileIsRefusedWithItsLine) {
  std::string why = testing::input_error_of([] { read_config_file(write_temp("bad.yaml", "a: 1\nb: [1, 2\n")); });
  EXPECT_NE(why.find("bad.yaml: invalid YAML at line "), std::string::npos) << why;
  why = testing::input_error_of([] { read_config_file(write_temp("twice.yml", "a: 1\nb: 2\na: 3\n")); });
  EXPECT_NE(why.find("twice.yml: line 3: key 'a' given twice"), std::string::npos) << why;
  why = testing::input_error_of([] { read_config_file(::testing::TempDir() + "/absent.yaml"); });
  EXPECT_NE(why.find("absent.yaml: cannot open"), std::string::npos) << why;
}

// A run config is one YAML document: a second one after `---` is refused naming its line, not
// dropped unread; a `---` that opens the only document is fine.
TEST(ConfigFile, ASecondYamlDocumentIsRefusedNotDropped) {
  const std::string why =
      testing::input_error_of([] { read_config_file(write_temp("two.yaml", "seed: 1\n---\nseed: 2\n")); });
  EXPECT_NE(why.find("two.yaml: a second YAML document at line 3 (after '---'); a run config is one document"),
            std::string::npos)
      << why;
  EXPECT_NE(testing::input_error_of([] {
              read_config_file(write_temp("trailing.yaml", "seed: 1\n---\n"));
            }).find("a second YAML document"),
            std::string::npos);
  EXPECT_EQ(read_config_file(write_temp("opened.yaml", "---\nseed: 1\n"))["seed"], 1);
}

// A tab in YAML's indentation is named as a tab, with its line (yaml-cpp may say "illegal map value").
TEST(ConfigFile, ATabInYamlIndentationIsNamedAsATab) {
  const std::string tabbed = write_temp("tabbed.yaml", "seed: 0\ntraining:\n\tsteps: 3\n");
  EXPECT_EQ(testing::input_error_of([&] { read_config_file(tabbed); }),
            tabbed + ": invalid YAML at line 3, column 1: a tab in the indentation (YAML indents with spaces only)");
  const std::string mixed = write_temp("mixed.yaml", "training:\n  steps: 3\n  \tbatch_size: 4\n");
  EXPECT_EQ(testing::input_error_of([&] { read_config_file(mixed); }),
            mixed + ": invalid YAML at line 3, column 3: a tab in the indentation (YAML indents with spaces only)");
  // A tab inside a value is text, not indentation.
  EXPECT_EQ(read_config_file(write_temp("tab-text.yaml", "a: |\n  x\n  \ty\n"))["a"], "x\n\ty\n");
}

TEST(ConfigOverrides, DottedKeysSetTypedValuesAndMakeMissingObjects) {
  json c = {{"training", {{"steps", 6}}}, {"seed", 0}};
  c = apply_overrides(c, parse_overrides({"--training.steps", "64", "--optimizer.lr=3e-4", "--model.path", "m/x",
                                          "--optimizer.betas", "[0.9, 0.95]"}));
  EXPECT_EQ(c["training"]["steps"], 64);
  EXPECT_DOUBLE_EQ(c["optimizer"]["lr"].get<double>(), 3e-4);
  EXPECT_EQ(c["model"]["path"], "m/x");
  EXPECT_EQ(c["optimizer"]["betas"], json::array({0.9, 0.95}));
  std::string why = testing::input_error_of([&] { apply_overrides(c, {{"seed.value", "1"}}); });
  EXPECT_NE(why.find("--seed.value: seed is a value, not an object of keys"), std::string::npos) << why;
  why = testing::input_error_of([] { parse_overrides({"--steps", "3"}); });
  EXPECT_NE(why.find("unknown argument '--steps'"), std::string::npos) << why;
  // The config's keys outside a section are set by their own names where the caller names them.
  const std::vector<ConfigOverride> top = parse_overrides({"--seed", "3", "--dtype=fp32"}, {"seed", "dtype"});
  c = apply_overrides(c, top);
  EXPECT_EQ(c["seed"], 3);
  EXPECT_EQ(c["dtype"], "fp32");
  why = testing::input_error_of([] { parse_overrides({"--steps", "3"}, {"seed", "dtype"}); });
  EXPECT_NE(why.find("unknown argument '--steps' (a config key is overridden as --section.key VALUE or --seed VALUE, "
                     "--dtype VALUE;"),
            std::string::npos)
      << why;
  why = testing::input_error_of([] { parse_overrides({"--sead", "3"}, {"seed", "dtype"}); });
  EXPECT_NE(why.find("unknown argument '--sead' (did you mean --seed?)"), std::string::npos) << why;
  why = testing::input_error_of([] { parse_overrides({"--training.steps"}); });
  EXPECT_NE(why.find("--training.steps: expected a value after it"), std::string::npos) << why;
  why = testing::input_error_of([] { apply_overrides(json::object(), {{"a..b", "1"}}); });
  EXPECT_NE(why.find("an empty key between dots"), std::string::npos) << why;
}

// A value is named by the last input that set it: the file, a flag for it, or a flag for an object
// above it (which replaced what came before); an object lists the flags that set keys inside it.
TEST(ValueSources, AValueIsNamedByTheLastInputThatSetIt) {
  const ValueSources s(
      "run.yaml", {{"optimizer.lr", "-1"}, {"optimizer", "{}"}, {"optimizer.name", "sgd"}, {"model.n_heads", "3"}});
  EXPECT_EQ(s.value("seed"), "run.yaml: seed");
  EXPECT_EQ(s.value("model.n_heads"), "--model.n_heads=3");
  EXPECT_EQ(s.value("model.n_heads_x"), "run.yaml: model.n_heads_x");
  EXPECT_EQ(s.value("optimizer.lr"), "--optimizer={}: optimizer.lr");
  EXPECT_EQ(s.value("optimizer.name"), "--optimizer.name=sgd");
  EXPECT_EQ(s.object("model"), "run.yaml: model (with --model.n_heads=3)");
  EXPECT_EQ(s.object("optimizer"), "--optimizer={} (with --optimizer.name=sgd)");
  EXPECT_EQ(s.object("data"), "run.yaml: data");
  EXPECT_EQ(s.object(""), "run.yaml (with --optimizer.lr=-1, --optimizer={}, --optimizer.name=sgd, --model.n_heads=3)");
}

TEST(NearestWord, SuggestsACloseKnownWordAndNothingFar) {
  EXPECT_EQ(edit_distance("batchsize", "batch_size"), 1u);
  EXPECT_EQ(edit_distance("trian", "train"), 1u);  // two neighbours swapped
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(nearest_word("step", {"batch_size", "steps"}), "steps");
  EXPECT_EQ(nearest_word("shufle", {"shuffle", "steps"}), "shuffle");
  EXPECT_EQ(nearest_word("colour", {"batch_size", "steps"}), "");
  EXPECT_EQ(nearest_word("lr", {"l"}), "") << "one letter left is no suggestion";
  EXPECT_EQ(nearest_word("steps", {"steps"}), "") << "a known word is not misspelt";
  EXPECT_EQ(nearest_word("dq", {"dp", "cp"}), "dp") << "ties go to the first";
}

// A quoted override is text, as YAML reads it: the quotes are not part of the value.
TEST(ConfigOverrides, AQuotedValueIsTextWithoutItsQuotes) {
  const json c = apply_overrides(json::object(), parse_overrides({"--a.b", "\"64\"", "--a.c='it''s'", "--a.d", "64"}));
  EXPECT_EQ(c["a"]["b"], "64");
  EXPECT_EQ(c["a"]["c"], "it's");
  EXPECT_EQ(c["a"]["d"], 64);
}

// An error names the input that gave the value: the flag for a value an override set (issue 43),
// the file for a value the file holds.
std::string load_error(const std::string& config, const std::vector<std::string>& words) {
  return testing::input_error_of([&] { RunConfig::load(config, parse_overrides(words)); });
}

TEST(ConfigOverrides, AnErrorInAnOverriddenValueNamesTheFlagNotTheFile) {
  const std::string yaml = testing::source_path("fixtures/runs/plan_small.yaml");
  EXPECT_EQ(load_error(yaml, {"--optimizer.lr=-1"}), "--optimizer.lr=-1: expected a learning rate >= 0, got -1");
  EXPECT_EQ(load_error(yaml, {"--training.steps", "\"two\""}),
            "--training.steps=\"two\": expected an integer, got string \"two\"");
  EXPECT_EQ(load_error(yaml, {"--training.step", "3"}),
            "--training.step: unknown key 'step' in training (did you mean steps?)");
  EXPECT_EQ(load_error(yaml, {"--training.reduction", "avg"}),
            "--training.reduction=avg: unknown reduction 'avg'; expected one of mean, sum_of_means, sum");
  // A flag that set an object above the bad value names the value after it.
  EXPECT_EQ(load_error(yaml, {"--optimizer.schedule", "{\"name\": \"step\"}"}),
            "--optimizer.schedule={\"name\": \"step\"}: optimizer.schedule.name: unknown schedule 'step'; expected one "
            "of constant, linear, cosine");
  // A rule between keys names the object, and the flags that set keys inside it.
  EXPECT_EQ(load_error(yaml, {"--model.n_heads", "3"}),
            yaml + ": model (with --model.n_heads=3): d_model 8 must be divisible by n_heads 3");
  // The file's own values are still the file's.
  const std::string config = testing::write_tiny_run_config("own-lr", {}, [](json& j) { j["optimizer"]["lr"] = -1; });
  EXPECT_EQ(load_error(config, {"--training.steps", "3"}),
            config + ": optimizer.lr: expected a learning rate >= 0, got -1");
}

// A misspelt key is named beside the key it was meant to be, with the nearest known key.
TEST(ConfigErrors, AMisspeltKeyIsNamedWithTheNearestKnownKey) {
  const std::string batchsize = testing::write_tiny_run_config("batchsize", {}, [](json& j) {
    j["training"]["batchsize"] = j["training"]["batch_size"];
    j["training"].erase("batch_size");
  });
  EXPECT_EQ(load_error(batchsize, {}),
            batchsize +
                ": training.batch_size is missing; training has an unknown key 'batchsize' (did you mean "
                "batch_size?)");
  const std::string trainig = testing::write_tiny_run_config("trainig", {}, [](json& j) {
    j["trainig"] = j["training"];
    j.erase("training");
  });
  EXPECT_EQ(load_error(trainig, {}),
            trainig + ": training is missing; the top level has an unknown key 'trainig' (did you mean training?)");
  const std::string shufle =
      testing::write_tiny_run_config("shufle", {}, [](json& j) { j["training"]["shufle"] = false; });
  EXPECT_EQ(load_error(shufle, {}), shufle + ": unknown key 'shufle' in training (did you mean shuffle?)");
  // Nothing near: the known keys.
  const std::string colour =
      testing::write_tiny_run_config("colour", {}, [](json& j) { j["training"]["colour"] = "red"; });
  EXPECT_EQ(load_error(colour, {}), colour +
                                        ": unknown key 'colour' in training; known keys: batch_size, checkpoints, "
                                        "label_smoothing, reduction, shuffle, spill_dir, steps, weights");
}

// The acceptance: a YAML config with two dotted overrides; run.json shows the resolved values.
TEST(RunRecord, MagicRunWritesTheResolvedConfigAndItsInputsChecksums) {
  const std::string out = testing::fresh_dir("run-record");
  const std::string yaml = testing::source_path("fixtures/runs/plan_small.yaml");
  const testing::CommandOutcome o =
      testing::magic_run("--config " + yaml + " --training.steps 3 --optimizer.lr=0.02 --html --out " + out);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("3 steps of 8"), std::string::npos) << o.output;
  // The report shows the config as the run read it: YAML, the overrides set.
  const std::string html = testing::read_file(out + "/report.html");
  EXPECT_NE(html.find("0.02"), std::string::npos);
  const json record = json::parse(testing::read_file(out + "/run.json"));
  EXPECT_EQ(record["tool"], "magic-run");
  EXPECT_FALSE(record["version"].get<std::string>().empty());
  EXPECT_EQ(record["config"]["training"]["steps"], 3);
  EXPECT_DOUBLE_EQ(record["config"]["optimizer"]["lr"].get<double>(), 0.02);
  EXPECT_EQ(record["config"]["optimizer"]["weight_decay"], 0.1) << "keys not overridden keep the file's value";
  EXPECT_EQ(record["overrides"], json({{"training.steps", "3"}, {"optimizer.lr", "0.02"}}));
  EXPECT_EQ(record["config_file"], yaml);
  ASSERT_EQ(record["inputs"].size(), 2u);
  EXPECT_EQ(record["inputs"][0]["role"], "train data");
  EXPECT_NE(record["inputs"][0]["fingerprint"].get<std::string>().find(" bytes, FNV-1a "), std::string::npos);
  // The record is enough to run again: the same config and overrides give the same scores.
  const std::string again = testing::fresh_dir("run-record-again");
  ASSERT_EQ(testing::magic_run("--config " + yaml + " --training.steps 3 --optimizer.lr=0.02 --out " + again).exit_code,
            0);
  EXPECT_EQ(testing::read_file(out + "/scores.safetensors"), testing::read_file(again + "/scores.safetensors"));
}

TEST(RunRecord, AnOverrideOfAnUnknownKeyIsRefusedByName) {
  const std::string yaml = testing::source_path("fixtures/runs/plan_small.yaml");
  const testing::CommandOutcome o = testing::magic_run("--config " + yaml + " --training.stepz 3");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("stepz"), std::string::npos) << o.output;
}

// --resume of a run whose data changed since it was interrupted finds no run to continue, and
// says which input changed (the interrupted run's folder is named by everything it read).
TEST(RunRecord, ResumeNamesTheInputThatChanged) {
  const std::string dir = testing::fresh_dir("resume-inputs");
  std::filesystem::create_directories(dir + "/spill");
  std::filesystem::copy_file(testing::source_path("fixtures/text/proverbs.jsonl"), dir + "/train.jsonl");
  json config = read_json_file(testing::source_path("fixtures/runs/plan_small.json"));
  config["data"]["train"] = dir + "/train.jsonl";
  config["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  config["training"]["spill_dir"] = dir + "/spill";
  const std::string path = write_temp("resume-inputs.json", config.dump());
  ASSERT_EQ(testing::magic_run("--config " + path + " --keep-checkpoints").exit_code, 0);
  std::ofstream(dir + "/train.jsonl", std::ios::app) << "{\"id\": \"new\", \"text\": \"A late verse.\"}\n";
  const testing::CommandOutcome o = testing::magic_run("--config " + path + " --resume");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("read other inputs: train data was "), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("query data was"), std::string::npos) << o.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace magic
