// The tracer in real magic-run runs: tracing changes no value (scores bit-identical; the traced
// tensors are the run's own to the bit), every client gets each record in order or a drop count,
// a mesh's ranks all reach rank 0's server, and bad trace flags are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "lib/io/safetensors.h"
#include "lib/live/trace_server.h"
#include "lib/trace/dump_reader.h"
#include "tests/live_run.h"
#include "tests/support.h"
#include "tests/tool_refusals.h"

namespace magic {
namespace {

using nlohmann::json;
using testing::BackgroundRun;

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

at::Tensor scores_of(const std::string& out) {
  return load_safetensors(out + "/scores.safetensors").tensors.at("scores");
}

TEST(LiveRun, TracingChangesNoScoreAndTheTracedTensorsAreTheRunsOwnToTheBit) {
  testing::TinyRun tiny;
  tiny.optimizer = "adamw";
  tiny.clip = true;
  const std::string config = testing::write_tiny_run_config("live-bit", tiny);
  const std::string plain = testing::fresh_dir("live-bit-plain"), dumped = testing::fresh_dir("live-bit-dumped"),
                    dump = testing::fresh_dir("live-bit-dump"), traced = testing::fresh_dir("live-bit-traced"),
                    file = testing::fresh_dir("live-bit-file");
  // Every record whole: the file keeps each tensor in safetensors.
  const std::string points = write_text("live-bit-points.json", R"({"points": [{"compressor": "none"}]})");
  ASSERT_EQ(testing::magic_run("--config " + config + " --out " + plain).exit_code, 0);
  ASSERT_EQ(testing::magic_run("--config " + config + " --out " + dumped + " --dump " + dump).exit_code, 0);
  const auto t = testing::magic_run("--config " + config + " --out " + traced + " --trace-file " + file +
                                    " --trace-points " + points);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(at::equal(scores_of(plain), scores_of(traced)));
  EXPECT_TRUE(at::equal(scores_of(plain), scores_of(dumped)));

  // The dump of a run without the tracer is what the run computed; the tracer's file must hold
  // the same tensors, bit for bit: every record the dump has, the final step's gradients included.
  std::map<std::string, at::Tensor> recorded;
  for (const DumpTensor& d : read_dump(dump).tensors) recorded[record_identity(d.record.record)] = d.whole;
  std::map<std::string, SafetensorsFile> files;
  int64_t compared = 0, last_step_gradients = 0;
  for (const json& m : testing::read_jsonl(file + "/records.jsonl")) {
    if (m["type"] != "record" || !m.contains("tensor")) continue;
    const TraceRecord r{m["name"], m["kind"], m["phase"], m["order"], m["step"], m["layer"], {}};
    const auto it = recorded.find(record_identity(r));
    if (it == recorded.end()) continue;  // the tracer's own records (running scores, attention)
    const std::string name = m["tensor"]["file"];
    if (!files.count(name)) files[name] = load_safetensors(file + "/" + name);
    EXPECT_TRUE(at::equal(files[name].tensors.at(m["tensor"]["key"].get<std::string>()), it->second))
        << record_place(r);
    ++compared;
    if (r.step == tiny.steps - 1 && r.kind == "reduced_gradient") ++last_step_gradients;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(recorded.size()));  // every dumped record was traced
  EXPECT_GT(last_step_gradients, 10);
  for (const std::string& d : {plain, dumped, dump, traced, file}) std::filesystem::remove_all(d);
}

TEST(LiveRun, EightClientsEachGetEveryRecordInOrderOrADropCount) {
  testing::TinyRun tiny;
  tiny.steps = 30;
  const std::string config = testing::write_tiny_run_config("live-eight", tiny);
  const std::string points = write_text("live-eight-points.json", R"({"points": [{"compressor": "stats"}]})");
  BackgroundRun run("--config " + config + " --trace-port 0 --trace-wait 60 --trace-points " + points,
                    ::testing::TempDir() + "/live-eight.log");
  const int port = run.port();
  ASSERT_GT(port, 0) << run.join().output;
  std::vector<StreamCheck> checks(8);
  std::vector<std::thread> clients;
  for (size_t c = 0; c < checks.size(); ++c) {
    clients.emplace_back([&, c] {
      TraceClient client(port, "/trace", "", run.token());
      checks[c] = read_stream(client);
    });
  }
  for (auto& t : clients) t.join();
  const auto outcome = run.join();
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  for (const StreamCheck& c : checks) {
    EXPECT_EQ(c.error, "");
    EXPECT_GT(c.records, 0);
    EXPECT_GT(c.end_records, 0);
    // A client that connected as the run began saw (or was told of) nearly all of them.
    EXPECT_GE(c.records + c.dropped, c.end_records / 2);
  }
  // The first client held the run until it came: it accounts for every record.
  int64_t complete = 0;
  for (const StreamCheck& c : checks) complete += c.records + c.dropped == c.end_records ? 1 : 0;
  EXPECT_GE(complete, 1);
}

// Reads `client` to the end message (or nothing for 20 s); every message parsed.
std::vector<json> read_to_end(TraceClient& client) {
  std::vector<json> messages;
  while (const std::optional<std::string> m = client.read()) {
    messages.push_back(json::parse(*m));
    if (messages.back()["type"] == "end") break;
  }
  return messages;
}

std::vector<int64_t> loss_steps(const std::vector<json>& messages) {
  std::vector<int64_t> steps;
  for (const json& m : messages) {
    if (m["type"] == "record" && m["kind"] == "loss") steps.push_back(m["step"].get<int64_t>());
  }
  return steps;
}

// Issue 43: a client that connected mid-run got nothing of the run so far, and the top examples
// were indices. A client that comes after four steps now gets the history first: with the live
// records after it, every loss step from 0, each once; and a score record names its examples by
// id, with how many scores are of each sign.
TEST(LiveRun, AClientThatComesAfterNStepsGetsTheHistoryAndScoresNameTheirExamples) {
  testing::TinyRun tiny;
  tiny.steps = 12;
  const std::string config = testing::write_tiny_run_config("live-late", tiny);
  const std::string out = testing::fresh_dir("live-late-out");
  BackgroundRun run("--config " + config + " --out " + out + " --trace-port 0 --trace-wait 60",
                    ::testing::TempDir() + "/live-late.log");
  const int port = run.port();
  ASSERT_GT(port, 0) << run.join().output;
  TraceClient first(port, "/trace", "", run.token());
  std::vector<json> early;
  while (loss_steps(early).empty() || loss_steps(early).back() < 4) {
    const std::optional<std::string> m = first.read();
    ASSERT_TRUE(m.has_value()) << "the stream ended before step 4";
    early.push_back(json::parse(*m));
  }
  TraceClient late(port, "/trace", "", run.token());
  for (const json& m : read_to_end(first)) early.push_back(m);
  const std::vector<json> later = read_to_end(late);
  const auto outcome = run.join();
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;

  ASSERT_GE(later.size(), 3u);
  EXPECT_EQ(later[0]["type"], "hello");
  ASSERT_EQ(later[1]["type"], "history");
  const int64_t history = later[1]["records"].get<int64_t>();
  EXPECT_GE(history, 5);  // at least the loss of steps 0 to 4
  EXPECT_GE(later[1]["seen"].get<int64_t>(), history);
  ASSERT_GE(static_cast<int64_t>(later.size()), 2 + history);
  const std::vector<json> kept(later.begin() + 2, later.begin() + 2 + history);
  ASSERT_FALSE(loss_steps(kept).empty());
  EXPECT_EQ(loss_steps(kept).front(), 0);
  EXPECT_GE(loss_steps(kept).back(), 4);
  std::vector<int64_t> all_steps(12);
  std::iota(all_steps.begin(), all_steps.end(), 0);
  EXPECT_EQ(loss_steps(early), all_steps);
  EXPECT_EQ(loss_steps(later), all_steps);  // the history, then the live records: each step once
  StreamCheck check;
  for (const json& m : later) check.take(m);
  EXPECT_EQ(check.error, "");
  EXPECT_EQ(check.history, history);
  EXPECT_EQ(check.end_records, early.back()["records"].get<int64_t>());

  const SafetensorsFile scores = load_safetensors(out + "/scores.safetensors");
  const json ids = json::parse(scores.metadata.at("example_ids"));
  const at::Tensor s = scores.tensors.at("scores");
  int64_t checked = 0;
  for (const json& m : early) {
    if (m["type"] != "record" || m["kind"] != "score" || m["step"] != -1) continue;
    EXPECT_EQ(m["data"]["positive"], (s > 0).sum().item<int64_t>());
    EXPECT_EQ(m["data"]["negative"], (s < 0).sum().item<int64_t>());
    for (const char* part : {"largest", "smallest"}) {
      const json& p = m["data"][part];
      ASSERT_EQ(p["id"].size(), p["index"].size());
      for (size_t i = 0; i < p["index"].size(); ++i) EXPECT_EQ(p["id"][i], ids[p["index"][i].get<size_t>()]);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 1);
  std::filesystem::remove_all(out);
}

TEST(LiveRun, EveryRankOfAMeshReachesRankZerosServerAndWritesItsFile) {
  testing::TinyRun tiny;
  const std::string config = testing::write_tiny_run_config("live-mesh", tiny);
  const std::string file = testing::fresh_dir("live-mesh-file");
  const auto [seen, outcome] =
      testing::watch_run("--config " + config + " --topology dp=2 --trace-port 0 --trace-wait 30 --trace-file " + file,
                         ::testing::TempDir() + "/live-mesh.log");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_EQ(seen.error, "");
  ASSERT_EQ(seen.next_seq.size(), 2u);
  // --trace-wait holds every rank until the client is there: both ranks' streams are whole.
  EXPECT_EQ(seen.dropped, 0);
  for (int64_t rank : {0, 1}) {
    const std::vector<json> lines = testing::read_jsonl(file + "/rank" + std::to_string(rank) + ".records.jsonl");
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back()["type"], "end");
    EXPECT_EQ(seen.next_seq.at(rank), lines.back()["records"].get<int64_t>()) << "rank " << rank;
    EXPECT_EQ(lines.front()["rank"], rank);
    EXPECT_EQ(lines.front()["coords"][0], rank);  // dp comes first in the mesh
  }
  std::filesystem::remove_all(file);
}

// docs/tracer_client.py (Debian's python3-websockets) against a real run: the projection of each
// block's hidden states onto demo-persona-vectors' direction (two chapters of Proverbs), per layer
// and step, and the loss.
TEST(LiveRun, ThePythonClientCollectsTheProjectionPerLayerOverSteps) {
  const std::string demo = testing::source_path("fixtures/runs/demo.json");
  const std::string vectors = ::testing::TempDir() + "/live-persona.safetensors";
  const auto made = testing::run_command(std::string(MAGIC_PERSONA_VECTORS_BINARY) + " --config " + demo +
                                         " --a Prv10 --b Prv11 --out " + vectors);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  testing::BackgroundRun run(
      "--config " + demo + " --training.steps 6 --trace-port 0 --trace-wait 60 --trace-vectors " + vectors,
      ::testing::TempDir() + "/live-persona.log");
  const int port = run.port();
  ASSERT_GT(port, 0) << run.join().output;
  const std::string out = ::testing::TempDir() + "/live-persona.json";
  const auto client = testing::run_command("/usr/bin/python3 " + testing::source_path("docs/tracer_client.py") +
                                           " ws://127.0.0.1:" + std::to_string(port) + "/trace --token " + run.token() +
                                           " --json " + out);
  const auto outcome = run.join();
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  ASSERT_EQ(client.exit_code, 0) << client.output;
  const json series = json::parse(testing::read_file(out));
  for (const std::string layer : {"blocks.0", "blocks.1"}) {
    ASSERT_TRUE(series["projection"].contains(layer)) << series.dump();
    EXPECT_EQ(series["projection"][layer].size(), 6u) << layer;  // one mean per training step
  }
  EXPECT_EQ(series["loss"].size(), 6u);
  EXPECT_EQ(series["dropped"], 0);
  EXPECT_NE(client.output.find("2 layers over 6 steps"), std::string::npos) << client.output;
  std::filesystem::remove(vectors);
  std::filesystem::remove(out);
}

TEST(LiveRun, BadTraceFlagsAreRefusedByNameBeforeTheRunStarts) {
  const std::string config = testing::write_tiny_run_config("live-flags", testing::TinyRun{});
  const std::string full = testing::fresh_dir("live-flags-full");
  std::filesystem::create_directories(full);
  std::ofstream(full + "/x") << "x";
  const std::string bad_points = write_text("live-flags-points.json", R"({"points": [{"compressor": "zip"}]})");
  const std::string not_vectors = write_text("live-flags-vectors.safetensors", "not a safetensors file");
  // Judged as magic-run parses its command line, in-process (a program start is a second of
  // LibTorch loading): each refusal one line naming the flag.
  const auto refusal = [&](const std::string& args) {
    return testing::magic_run_refusal("--config " + config + " " + args);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--trace-port 70000", "--trace-port 70000: expected a port from 0 to 65535"},
      {"--trace-file " + full, "--trace-file " + full},
      {"--trace-port 0 --trace-points " + bad_points, "points[0].compressor: expected one of none, stats"},
      {"--trace-port 0 --trace-vectors " + not_vectors, not_vectors},
      {"--trace-points " + bad_points, "--trace-points: needs --trace-port or --trace-file"},
      {"--trace-wait 5", "--trace-wait: needs --trace-port or --trace-file"},
      {"--trace-file " + full + "-new --trace-wait 5", "--trace-wait: needs --trace-port"},
      {"--trace-bind 0.0.0.0", "--trace-bind: needs --trace-port"},
      {"--trace-port 0 --trace-bind nowhere", "--trace-bind nowhere: expected an IP address"},
      {"--trace-port 0 --trace-wait 90 --topology dp=2", "expected less than --timeout"},
  };
  for (const auto& [flags, expected] : cases) {
    const std::string refused = refusal(flags);
    EXPECT_NE(refused.find(expected), std::string::npos) << flags << "\n" << refused;
    EXPECT_EQ(refused.find('\n'), std::string::npos) << "one line: " << refused;
  }
  EXPECT_EQ(refusal("--trace-port 0 --trace-wait 5"), "(accepted)");  // the judge accepts good flags
  EXPECT_FALSE(std::filesystem::exists(full + "-new"));

  // Through the program: a port another server holds is found when the tracer binds it, exit 2.
  TraceServer busy(
      TraceServerOptions{},
      TraceServerHooks{[] { return std::string("{}"); }, [](const std::string&) { return ClientReply{}; }, {}});
  const std::string taken = std::to_string(busy.port());
  const auto bound = testing::magic_run("--config " + config + " --trace-port " + taken);
  EXPECT_EQ(bound.exit_code, 2) << bound.output;
  EXPECT_NE(bound.output.find("--trace-port " + taken + ": cannot bind 127.0.0.1:" + taken), std::string::npos)
      << bound.output;
  EXPECT_EQ(bound.output.find("magic-run:"), bound.output.rfind("magic-run:")) << "one line: " << bound.output;
  // Refused after the tracer started (a query index checked once the data is loaded): the trace
  // folder it began is gone again.
  const std::string folder = testing::fresh_dir("live-flags-late");
  const auto late = testing::magic_run("--config " + config + " --per-query --query 99 --trace-file " + folder);
  EXPECT_EQ(late.exit_code, 2) << late.output;
  EXPECT_NE(late.output.find("--query 99"), std::string::npos) << late.output;
  EXPECT_FALSE(std::filesystem::exists(folder));
  std::filesystem::remove_all(full);
}

}  // namespace
}  // namespace magic
