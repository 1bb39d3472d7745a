// The report formats: the JSON keys docs/magic-check.md documents ("Report schema"), and JUnit
// XML that a strict reader parses with one testcase per row and a failure element exactly where
// a row failed.
#include <gtest/gtest.h>

#include <sstream>

#include "lib/io/report.h"
#include "tests/support.h"
#include "tests/xml_reader.h"

namespace magic {
namespace {

CheckReport sample_report() {
  CheckReport r;
  r.topology = "dp=4";
  r.world_size = 4;
  r.workload = "lm";
  r.dtype = "fp64";
  r.convention = "sum";
  r.backend = "gloo";
  r.steps = 3;
  at::Tensor ref = at::tensor({1.0, 2.0, -3.0}, at::kDouble);
  const auto factors = candidate_factors({{"dp", 4}});
  r.rows.push_back(make_check_row("grad", "head.weight", ref, ref, 1e-9, factors));
  r.rows.push_back(make_check_row("hvp", "theta_<0> & \"N\"", ref * 4, ref, 1e-9, factors));
  r.bite_mode = true;
  r.bite.push_back({"extra-divide-scores", "scores / dp", "scores", "1/dp", "scores", "1/dp", "1/dp", true, true,
                    "first divergence: replay, scores score (metagradient), 1/dp"});
  r.bite.push_back({"missing-reduce", "no reduce", "grad", "", "", "", "through grad", false, true, ""});
  return r;
}

TEST(Report, JsonHasTheDocumentedSchema) {
  auto j = report_json(sample_report());
  const std::vector<std::string> keys = {
      "tool",    "topology", "world_size", "workload",         "config",       "model",      "dtype",   "convention",
      "backend", "steps",    "seed",       "label_smoothing",  "mutation",     "passed",     "seconds", "checks",
      "notes",   "bite",     "failure",    "first_divergence", "bite_skipped", "failed_rank"};
  for (const auto& key : keys) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["topology"], "dp=4");
  EXPECT_EQ(j["passed"], false);
  ASSERT_EQ(j["checks"].size(), 2u);
  for (const char* key : {"level", "tensor", "pass", "scale", "mean_ratio", "worst_rel_err", "cosine", "tolerance",
                          "numel", "verdict", "diagnosis", "factor"}) {
    EXPECT_TRUE(j["checks"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["checks"][1]["verdict"], "fail");
  EXPECT_EQ(j["checks"][1]["factor"], "x dp");
  EXPECT_EQ(j["checks"][1]["scale"], 4.0);
  EXPECT_EQ(j["bite"][1]["caught"], false);
  EXPECT_EQ(j["bite"][0]["expected"]["factor"], "1/dp");
  // A run with nothing to name says null; a mutation's line is carried as written.
  EXPECT_TRUE(j["first_divergence"].is_null());
  EXPECT_TRUE(j["bite"][1]["first_divergence"].is_null());
  EXPECT_EQ(j["bite"][0]["first_divergence"], "first divergence: replay, scores score (metagradient), 1/dp");
}

TEST(Report, JunitIsWellFormedAndMatchesTheRows) {
  const CheckReport report = sample_report();
  auto root = testing::parse_xml(junit_xml(report));
  EXPECT_EQ(root->name, "testsuites");
  EXPECT_EQ(root->attributes.at("tests"), "4");
  EXPECT_EQ(root->attributes.at("failures"), "2");
  auto suites = root->all("testsuite");
  ASSERT_EQ(suites.size(), 2u);
  auto cases = suites[0]->all("testcase");
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0]->attributes.at("classname"), "grad");
  EXPECT_TRUE(cases[0]->all("failure").empty());
  EXPECT_EQ(cases[1]->attributes.at("name"), "theta_<0> & \"N\"");  // escaped and read back
  ASSERT_EQ(cases[1]->all("failure").size(), 1u);
  EXPECT_EQ(cases[1]->all("failure")[0]->attributes.at("message"), "x dp (scale 4.000000)");
  auto bite = suites[1]->all("testcase");
  ASSERT_EQ(bite.size(), 2u);
  EXPECT_TRUE(bite[0]->all("failure").empty());
  EXPECT_EQ(bite[1]->all("failure").size(), 1u);
}

// The tests and failures attributes count exactly the testcases written, in every mode (a
// --mutate report once said tests="40" over 39 cases: its one mutation outcome was counted).
TEST(Report, JunitCountsEqualTheTestcasesWrittenInEveryMode) {
  CheckReport bite = sample_report();
  bite.bite_skipped.push_back({"fp16-unscale-twice", "needs fp16"});
  CheckReport mutate = sample_report();
  mutate.bite_mode = false;
  mutate.mutation = "extra-divide-scores";
  mutate.bite.resize(1);
  mutate.bite_skipped.push_back({"fp16-unscale-twice", "needs fp16"});
  CheckReport empty = mutate;
  empty.rows.clear();
  for (const CheckReport* r : {&bite, &mutate, &empty}) {
    const auto root = testing::parse_xml(junit_xml(*r));
    size_t cases = 0, failures = 0;
    for (const auto* suite : root->all("testsuite")) {
      for (const auto* c : suite->all("testcase")) {
        ++cases;
        failures += c->all("failure").size();
      }
    }
    EXPECT_EQ(root->attributes.at("tests"), std::to_string(cases)) << junit_xml(*r);
    EXPECT_EQ(root->attributes.at("failures"), std::to_string(failures)) << junit_xml(*r);
  }
  EXPECT_EQ(testing::parse_xml(junit_xml(mutate))->attributes.at("tests"), "2");
  EXPECT_EQ(testing::parse_xml(junit_xml(bite))->attributes.at("tests"), "5");
}

TEST(Report, AMissedMutationSaysHowFarItsRunWent) {
  const CheckReport report = sample_report();  // missing-reduce: nothing failed, levels through grad run
  std::ostringstream text;
  print_report(report, text);
  EXPECT_NE(text.str().find("nothing failed through grad"), std::string::npos) << text.str();
  const auto root = testing::parse_xml(junit_xml(report));
  auto bite = root->all("testsuite")[1]->all("testcase");
  ASSERT_EQ(bite[1]->all("failure").size(), 1u);
  EXPECT_EQ(bite[1]->all("failure")[0]->text, "observed no failure through grad");
}

// A run that ended before rank 0 reported: "failure" carries the launcher's lines, "failed_rank"
// the rank it blames, its kind, phase and message; the one JUnit case is named after that rank and
// phase. A rank that failed the check makes the report's code 1, a failed run's stays 2.
TEST(Report, AFailedRunNamesItsRankInJsonAndJunit) {
  CheckReport r = sample_report();
  r.rows.clear();
  r.bite_mode = false;
  r.bite.clear();
  r.failure = "magic-check: rank 2 of 4 (pid 7) failed with its own error in phase 'step gradients at step 0': ...";
  EXPECT_TRUE(report_json(r)["failed_rank"].is_null()) << "no rank named";
  EXPECT_EQ(r.exit_code(), 2);
  r.failed_rank = FailedRank{2, "failed", "step gradients at step 0", "index out of range in self", true};
  const auto j = report_json(r);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["failure"], r.failure);
  EXPECT_EQ(j["failed_rank"], nlohmann::ordered_json::parse(R"({"rank": 2, "kind": "failed",
      "phase": "step gradients at step 0", "message": "index out of range in self"})"));
  EXPECT_EQ(r.exit_code(), 1);
  const auto root = testing::parse_xml(junit_xml(r));
  EXPECT_EQ(root->attributes.at("failures"), "1");
  const auto cases = root->all("testsuite")[0]->all("testcase");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0]->attributes.at("classname"), "rank 2");
  EXPECT_EQ(cases[0]->attributes.at("name"), "step gradients at step 0");
  ASSERT_EQ(cases[0]->all("failure").size(), 1u);
  EXPECT_EQ(cases[0]->all("failure")[0]->attributes.at("message"), r.failure);
  EXPECT_EQ(cases[0]->all("failure")[0]->attributes.at("type"), "failed");
  r.failed_rank = FailedRank{1, "killed", "", "was killed by signal 9 (SIGKILL)", false};
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_TRUE(report_json(r)["failed_rank"]["phase"].is_null());
  EXPECT_EQ(testing::parse_xml(junit_xml(r))->all("testsuite")[0]->all("testcase")[0]->attributes.at("name"),
            "unknown phase");
}

TEST(XmlReader, RejectsMalformedDocuments) {
  EXPECT_THROW(testing::parse_xml("<a><b></a>"), std::runtime_error);
  EXPECT_THROW(testing::parse_xml("<a x=\"1\" x=\"2\"/>"), std::runtime_error);
  EXPECT_THROW(testing::parse_xml("<a>1 < 2</a>"), std::runtime_error);
  EXPECT_THROW(testing::parse_xml("<a>&nbsp;</a>"), std::runtime_error);
  EXPECT_THROW(testing::parse_xml("<a></a><b/>"), std::runtime_error);
  EXPECT_NO_THROW(testing::parse_xml("<?xml version=\"1.0\"?>\n<a x=\"&amp;\"><b/>text</a>\n"));
}

TEST(Report, ExitCodes) {
  CheckReport r = sample_report();
  EXPECT_EQ(r.exit_code(), 1);  // a failing row and an uncaught mutation
  r.rows.pop_back();
  EXPECT_EQ(r.exit_code(), 1);  // the uncaught mutation still fails --bite
  r.bite.pop_back();
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace magic
