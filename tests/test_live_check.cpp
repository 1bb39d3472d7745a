// The tracer in real magic-check runs (docs/tracer.md, "magic-check"): every rank of a mesh
// streams its distributed runs through rank 0, each run under its name; tracing changes no figure,
// verdict or first divergence of the report; micro-batches' forward records are named by their
// micro-batch; a three-pool layout streams rank 0's whole records;
// bad trace flags are refused by name before the reference is computed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "checks/run_check.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/live/trace_control.h"
#include "lib/live/trace_server.h"
#include "lib/live/tracer_sink.h"
#include "lib/trace/trace_record.h"
#include "tests/live_run.h"
#include "tests/support.h"

namespace magic {
namespace {

using nlohmann::json;

testing::CommandOutcome magic_check(const std::string& args) {
  return testing::run_command(std::string(MAGIC_CHECK_BINARY) + " " + args);
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

// A report without its wall time: what tracing must leave unchanged.
json report_without_time(const std::string& path) {
  json r = json::parse(testing::read_file(path));
  r.erase("seconds");
  return r;
}

std::string identity_of(const json& m) {
  return record_identity(TraceRecord{m["name"], m["kind"], m["phase"], m["order"], m["step"], m["layer"], {}});
}

struct Collected : TraceOutput {
  std::vector<std::shared_ptr<const TraceEvent>> events;
  void publish(const std::shared_ptr<const TraceEvent>& e) override { events.push_back(e); }
};

// The records a check streams are its run's own: on one rank (the first divergence's recorder
// listening beside the tracer), each streamed tensor, kept whole by `none`, equals the reference's
// record of the same identity to fp64 rounding, from the first step's input to REPLAY's scores. A
// tracer that listened from before the run's records begin would send, for each step, the
// gradients of the clip norm's choice (at θ_0) instead.
TEST(LiveCheck, TheStreamedTensorsAreTheRunsOwnRecords) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=1");
  request.settings.steps = 3;
  request.settings.record_reference = true;
  request.settings.validate();
  const auto references = std::make_shared<const checks::ReferenceRuns>(checks::run_references(request.settings));
  request.references = references;
  request.trace_folder = testing::fresh_dir("live-own-records");
  TracerSink sink(TraceOrigin{"magic-check dp=1", 0, 1, {}, {}},
                  parse_control(json{{"points", {{{"compressor", "none"}, {"max_elements", 1}}}}}));
  Collected out;
  sink.add_output(&out);
  CheckReport report;
  dist::run_ranks_in_threads(1, [&](dist::Runtime& rt) { report = checks::run_check(request, rt, &sink); });
  EXPECT_TRUE(report.rows_pass());
  EXPECT_FALSE(tracing());  // the tracer listened through the run only

  std::map<std::string, at::Tensor> reference;
  for (const DumpSink::Entry& e : references->reference.trace) reference[record_identity(e.record)] = e.tensor;
  int64_t compared = 0;
  std::set<std::string> kinds, steps;
  for (const auto& event : out.events) {
    if (!event->record) continue;
    const json m = json::parse(event->text);
    EXPECT_EQ(m["run"], "clean");
    const auto it = reference.find(identity_of(m));
    if (it == reference.end()) continue;  // the tracer's own (attention, running scores), the check's own (HVPs)
    ASSERT_TRUE(event->tensor.defined());
    // |a - b| <= 1e-10 |b| entrywise at worst; where the reference is zero (the first step's update
    // under warmup), the streamed tensor must be zero too.
    const double off = (event->tensor - it->second).abs().max().item<double>();
    EXPECT_LE(off, 1e-10 * it->second.abs().max().item<double>())
        << record_place(TraceRecord{m["name"], m["kind"], m["phase"], m["order"], m["step"], m["layer"], {}});
    ++compared;
    kinds.insert(m["kind"].get<std::string>());
    steps.insert(m["step"].dump());
  }
  std::cout << "live check: " << compared << " streamed tensors equal the reference's records (of " << reference.size()
            << " reference records; kinds " << kinds.size() << ")" << std::endl;
  EXPECT_EQ(compared, static_cast<int64_t>(reference.size()));  // every record the reference made was streamed
  for (const std::string kind : {"input", "activation", "loss", "gradient", "update", "cotangent", "score"})
    EXPECT_TRUE(kinds.count(kind)) << kind;
  EXPECT_EQ(steps, (std::set<std::string>{"-1", "0", "1", "2"}));
  std::filesystem::remove_all(request.trace_folder);
}

TEST(LiveCheck, EveryRankOfTheMeshStreamsTheCleanRunAndTheReportIsUnchanged) {
  const std::string plain = temp_path("live-check-plain.json"), traced = temp_path("live-check-traced.json");
  const std::string file = testing::fresh_dir("live-check-file");
  const std::string layout = "--topology dp=2,cp=2 --steps 2";
  const auto without = magic_check(layout + " --json " + plain);
  ASSERT_EQ(without.exit_code, 0) << without.output;
  const auto [seen, outcome] =
      testing::watch_run(layout + " --json " + traced + " --trace-port 0 --trace-wait 30 --trace-file " + file,
                         temp_path("live-check.log"), MAGIC_CHECK_BINARY);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;

  // Tracing changes nothing the check computes: every figure and verdict of the report is the same.
  EXPECT_EQ(report_without_time(plain), report_without_time(traced));
  EXPECT_EQ(seen.error, "");
  ASSERT_EQ(seen.next_seq.size(), 4u);  // the four ranks reached rank 0's server
  EXPECT_EQ(seen.dropped, 0);           // --trace-wait held every rank until the client came
  for (const std::string kind :
       {"input", "activation", "attention", "loss", "gradient", "reduced_gradient", "update", "cotangent", "score"}) {
    EXPECT_GT(seen.by_kind.count(kind) ? seen.by_kind.at(kind) : 0, 0) << kind;
  }
  std::set<std::vector<int64_t>> coords;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const std::vector<json> lines = testing::read_jsonl(file + "/rank" + std::to_string(rank) + ".records.jsonl");
    ASSERT_GE(lines.size(), 2u) << rank;
    EXPECT_EQ(lines.back()["type"], "end");
    EXPECT_EQ(lines.back()["status"], "finished");
    EXPECT_EQ(seen.next_seq.at(rank), lines.back()["records"].get<int64_t>()) << "rank " << rank;
    std::set<std::string> identities;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      if (lines[i]["type"] != "record") continue;
      EXPECT_EQ(lines[i]["run"], "clean");
      EXPECT_EQ(lines[i]["rank"], rank);
      EXPECT_TRUE(identities.insert(identity_of(lines[i])).second) << "sent twice: " << lines[i].dump();
    }
    coords.insert(lines.front()["coords"].get<std::vector<int64_t>>());
  }
  EXPECT_EQ(coords.size(), 4u);  // each rank its own place in the mesh
  std::filesystem::remove_all(file);
  std::filesystem::remove(plain);
  std::filesystem::remove(traced);
}

// --bite's runs on one stream: the clean run, then each mutation's under its name, each whole; the
// first-divergence recorder still hears every trace point beside the tracer.
TEST(LiveCheck, BiteStreamsEachRunUnderItsNameAndFindsTheSameFirstDivergences) {
  const std::string plain = temp_path("live-bite-plain.json"), traced = temp_path("live-bite-traced.json");
  const std::string file = testing::fresh_dir("live-bite-file");
  const std::string layout = "--topology dp=2 --steps 2 --bite";
  const auto without = magic_check(layout + " --json " + plain);
  ASSERT_EQ(without.exit_code, 0) << without.output;
  const auto with = magic_check(layout + " --json " + traced + " --trace-file " + file);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  const json report = report_without_time(traced);
  EXPECT_EQ(report_without_time(plain), report);
  std::vector<std::string> expected_runs = {"clean"};
  int64_t divergences = 0;
  for (const json& b : report["bite"]) {
    expected_runs.push_back("mutation " + b["mutation"].get<std::string>());
    if (b["first_divergence"].is_string() &&
        b["first_divergence"].get<std::string>().rfind("first divergence: step", 0) == 0)
      ++divergences;
  }
  EXPECT_GE(expected_runs.size(), 10u);
  EXPECT_GE(divergences, 5);  // named from records the ranks wrote with the tracer listening too

  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<json> lines = testing::read_jsonl(file + "/rank" + std::to_string(rank) + ".records.jsonl");
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back()["type"], "end");
    std::vector<std::string> runs;
    std::map<std::string, std::set<std::string>> identities;
    for (const json& m : lines) {
      if (m["type"] != "record") continue;
      const std::string run = m["run"];
      if (runs.empty() || runs.back() != run) runs.push_back(run);
      EXPECT_TRUE(identities[run].insert(identity_of(m)).second) << "sent twice in its run: " << m.dump();
    }
    EXPECT_EQ(runs, expected_runs) << "rank " << rank;  // in order, each run once, none interleaved
    // A record the clean run made (step 0's loss) is made again, and sent, by each mutation's run.
    const std::string loss = record_identity(TraceRecord{"loss", "loss", "forward", "forward", 0, "", {}});
    for (const std::string& run : expected_runs) EXPECT_TRUE(identities[run].count(loss)) << run << ", rank " << rank;
  }
  std::filesystem::remove_all(file);
  std::filesystem::remove(plain);
  std::filesystem::remove(traced);
}

// The three-pool workload assembles its tensors whole on rank 0 after each run: that rank streams
// them, the others send nothing but their end.
TEST(LiveCheck, AThreePoolLayoutStreamsRankZerosWholeRecords) {
  const std::string file = testing::fresh_dir("live-pools-file");
  const auto o = magic_check("--topology n_ci=2,n_per_block=1 --steps 2 --trace-file " + file);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::vector<json> first = testing::read_jsonl(file + "/rank0.records.jsonl");
  std::map<std::string, int64_t> kinds;
  for (const json& m : first) {
    if (m["type"] != "record") continue;
    EXPECT_EQ(m["run"], "clean");
    EXPECT_TRUE(m["coords"].empty());
    ++kinds[m["kind"].get<std::string>()];
  }
  for (const std::string kind : {"gradient", "update", "other", "score"}) EXPECT_GT(kinds[kind], 0) << kind;
  const std::vector<json> other = testing::read_jsonl(file + "/rank1.records.jsonl");
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0]["type"], "end");
  EXPECT_EQ(other[0]["records"], 0);
  std::filesystem::remove_all(file);
}

// With micro-batches each rank streams every micro-batch's forward records, named by it (rank 1
// holds 2 of the 5 rows of dp=2,mb=2: micro-batches of one row each), and the step's gradients and
// updates once, as whole-step records.
TEST(LiveCheck, MicroBatchesStreamTheirForwardRecordsByMicroBatch) {
  const std::string file = testing::fresh_dir("live-micro-batches-file");
  const auto o = magic_check("--topology dp=2,mb=2 --batch 5 --steps 2 --trace-file " + file);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::map<std::string, std::set<int64_t>> micro_batches;  // "step kind" -> micro-batches seen
  for (const json& m : testing::read_jsonl(file + "/rank1.records.jsonl")) {
    if (m["type"] != "record" || m["run"] != "clean") continue;
    const int64_t k = m.contains("micro_batch") ? m["micro_batch"].get<int64_t>() : -1;
    micro_batches[std::to_string(m["step"].get<int64_t>()) + " " + m["kind"].get<std::string>()].insert(k);
    if (m["kind"] == "input") {
      EXPECT_EQ(m["shape"][0], 1) << m.dump();
    }
  }
  for (const std::string step : {"0", "1"}) {
    for (const std::string kind : {"input", "activation", "logits", "loss"}) {
      EXPECT_EQ(micro_batches[step + " " + kind], (std::set<int64_t>{0, 1})) << step << " " << kind;
    }
    for (const std::string kind : {"gradient", "reduced_gradient", "update"}) {
      EXPECT_EQ(micro_batches[step + " " + kind], (std::set<int64_t>{-1})) << step << " " << kind;
    }
  }
  std::filesystem::remove_all(file);
}

TEST(LiveCheck, BadTraceFlagsAreRefusedByNameBeforeTheReference) {
  const std::string full = testing::fresh_dir("live-check-full");
  std::filesystem::create_directories(full);
  std::ofstream(full + "/x") << "x";
  const std::string bad_points = temp_path("live-check-points.json");
  std::ofstream(bad_points) << R"({"points": [{"run": 3, "compressor": "stats"}]})";
  TraceServer busy(
      TraceServerOptions{},
      TraceServerHooks{[] { return std::string("{}"); }, [](const std::string&) { return ClientReply{}; }, {}});
  const std::string taken = std::to_string(busy.port());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--launch threads --trace-file " + full + "-new",
       "--trace-file: not with --launch threads (its rank threads share one process's trace points)"},
      {"--trace-port " + taken, "--trace-port " + taken + ": cannot bind 127.0.0.1:" + taken},
      {"--trace-port 0 --trace-wait 90", "--trace-wait 90: under --topology, expected less than --timeout (60 s)"},
      {"--trace-file " + full, "--trace-file " + full},
      {"--trace-port 0 --trace-points " + bad_points, "points[0].run: expected a string"},
      {"--trace-points " + bad_points, "--trace-points: needs --trace-port or --trace-file"},
      {"--trace-bind 0.0.0.0", "--trace-bind: needs --trace-port"},
      {"--trace-port 0 --trace-token short", "--trace-token: expected 16 to 256 characters"},
      {"--trace-port 0 --trace-bind 0.0.0.0 --trace-token none", "--trace-token none: only with a loopback"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto r = magic_check("--topology dp=2 " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("magic-check:"), r.output.rfind("magic-check:")) << "one line: " << r.output;
    EXPECT_EQ(r.output.find("reference"), std::string::npos) << "refused after the reference began: " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(full + "-new"));
  std::filesystem::remove_all(full);
  std::filesystem::remove(bad_points);
}

}  // namespace
}  // namespace magic
