// magic-run --topology: the same attribution through the distributed pipeline (spawned ranks,
// Gloo on loopback) gives the single-process scores to fp64 rounding, repeats bit-exactly, and
// magic-score-diff (the tool a user compares them with) fails on scores that differ.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lib/io/safetensors.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "tests/support.h"

namespace magic {
namespace {

std::string tiny_config(const std::string& name) {
  return testing::write_tiny_run_config(name, {}, [](nlohmann::json& j) {
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}, {"clip_norm", 1.0}};
  });
}

using testing::fresh_dir;
using testing::magic_run;

testing::CommandOutcome score_diff(const std::string& a, const std::string& b) {
  return testing::run_command(std::string(MAGIC_SCORE_DIFF_BINARY) + " " + a + "/scores.safetensors " + b +
                              "/scores.safetensors");
}

TEST(MagicRunDistributed, ScoresEqualTheSingleProcessRunAndRepeatBitExactly) {
  const std::string config = tiny_config("distributed");
  const std::string single = fresh_dir("mr-single"), mesh = fresh_dir("mr-mesh"), again = fresh_dir("mr-mesh-again");
  const testing::CommandOutcome one = magic_run("--config " + config + " --out " + single);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // dp=2, cp=2 with fsdp=2: rows, sequence chunks and parameter shards all split.
  const std::string layout = " --topology dp=2,cp=2,fsdp=2";
  testing::CommandOutcome o = magic_run("--config " + config + layout + " --out " + mesh);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // The tiny model learns little beyond byte frequencies: rank 0 says so with the single process's
  // figures (each rank's training loss is its share of the batch's; the ranks sum them).
  const auto learned_little = [](const std::string& output) {
    const size_t at = output.find("magic-run: warning: the model learned little beyond token frequencies: ");
    return at == std::string::npos ? std::string() : output.substr(at, output.find('\n', at) - at);
  };
  EXPECT_NE(learned_little(one.output), "") << one.output;
  EXPECT_EQ(learned_little(o.output), learned_little(one.output)) << o.output;
  EXPECT_NE(o.output.find("on dp=2,cp=2,fsdp=2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("REPLAY: 6 steps in "), std::string::npos) << o.output;  // rank 0's progress
  ASSERT_EQ(magic_run("--config " + config + layout + " --out " + again).exit_code, 0);

  const at::Tensor a = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  const at::Tensor d = load_safetensors(mesh + "/scores.safetensors").tensors.at("scores");
  const at::Tensor r = load_safetensors(again + "/scores.safetensors").tensors.at("scores");
  const double error = (d - a).abs().max().item<double>() / a.abs().max().item<double>();
  std::cout << "dp=2,cp=2,fsdp=2 vs single process: relative error " << error << "\n";
  EXPECT_LE(error, 1e-10);
  EXPECT_TRUE(at::equal(d, r)) << "two identical distributed runs differ";

  testing::CommandOutcome same = score_diff(mesh, single);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("within the tolerance"), std::string::npos) << same.output;
  EXPECT_NE(score_diff(mesh, again).output.find("bit-identical: yes"), std::string::npos);
}

// Gradient accumulation (mb=2) on 5 rows: replicas of 3 and 2 rows, micro-batches of 2,1 and 1,1;
// the scores are the single process's full-batch ones to fp64 rounding. A batch a replica cannot
// split into mb micro-batches is refused before any rank starts. The run's dump names each
// micro-batch's forward records: micro-batch k holds every replica's k-th micro-batch (rows 0,1,3
// and 2,4 of each step's 5), whose loss terms add up to the single process's step loss, and every
// record both runs make agrees.
TEST(MagicRunDistributed, MicroBatchesGiveTheSingleProcessScores) {
  testing::TinyRun run;
  run.batch_size = 5;
  const std::string config = testing::write_tiny_run_config("micro-batches", run);
  const std::string single = fresh_dir("mr-mb-single"), mesh = fresh_dir("mr-mb-mesh");
  const std::string single_dump = fresh_dir("mr-mb-single.dump"), mesh_dump = fresh_dir("mr-mb-mesh.dump");
  testing::CommandOutcome o = magic_run("--config " + config + " --out " + single + " --dump " + single_dump);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = magic_run("--config " + config + " --topology dp=2,mb=2 --out " + mesh + " --dump " + mesh_dump);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("on dp=2,mb=2"), std::string::npos) << o.output;
  const at::Tensor a = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  const at::Tensor d = load_safetensors(mesh + "/scores.safetensors").tensors.at("scores");
  EXPECT_LE((d - a).abs().max().item<double>() / a.abs().max().item<double>(), 1e-10);

  const LoadedDump one = read_dump(single_dump), many = read_dump(mesh_dump);
  auto find = [](const LoadedDump& dump, const std::string& name, int64_t micro_batch) -> at::Tensor {
    for (const auto& t : dump.tensors) {
      const TraceRecord& r = t.record.record;
      if (r.name == name && r.step == 0 && r.micro_batch == micro_batch && r.phase == "forward") return t.whole;
    }
    return at::Tensor();
  };
  const at::Tensor ids = find(one, "input_ids", -1), loss = find(one, "loss", -1);
  ASSERT_TRUE(ids.defined() && loss.defined());
  const std::vector<std::vector<int64_t>> rows = {{0, 1, 3}, {2, 4}};
  at::Tensor terms = at::zeros({}, at::kDouble);
  for (int64_t k = 0; k < 2; ++k) {
    const at::Tensor micro_ids = find(many, "input_ids", k), micro_loss = find(many, "loss", k);
    ASSERT_TRUE(micro_ids.defined() && micro_loss.defined()) << "micro-batch " << k;
    EXPECT_TRUE(at::equal(micro_ids, ids.index_select(0, at::tensor(rows[k], at::kLong)))) << "micro-batch " << k;
    terms += micro_loss.to(at::kDouble);
  }
  EXPECT_LE((terms - loss.to(at::kDouble)).abs().item<double>(), 1e-12 * loss.abs().item<double>());
  EXPECT_FALSE(find(many, "loss", -1).defined()) << "the step's loss is its micro-batches' records";
  CompareOptions common;
  common.common_only = true;
  const DumpComparison c = compare_dumps(many, one, common);
  EXPECT_GT(c.rows.size(), 20u);
  EXPECT_TRUE(c.passed()) << c.first_divergence_line();

  o = magic_run("--config " + config + " --topology dp=2,mb=3");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("mb=3 needs at least 3 rows on every dp replica (one per micro-batch), but "
                          "training.batch_size of 5 rows gives a replica 2"),
            std::string::npos)
      << o.output;
  for (const std::string& dir : {single, mesh, single_dump, mesh_dump}) std::filesystem::remove_all(dir);
}

// Tensor parallelism (tp=2: each rank one of the tiny model's 2 heads, half the MLP and half the
// padded vocabulary) beside dp, with micro-batches and checkpoints spilled to each rank's folder,
// and with sp and micro-batches together: the single process's scores to fp64 rounding, its learned-little figures (the
// training losses are summed over the ranks splitting the batch, not over tp), and a report.html.
TEST(MagicRunDistributed, TensorParallelGivesTheSingleProcessScores) {
  const std::string config = tiny_config("tensor-parallel");
  const std::string single = fresh_dir("mr-tp-single"), dp_tp = fresh_dir("mr-tp-dp2"), tp_mb = fresh_dir("mr-tp-mb2");
  const std::string spill = fresh_dir("mr-tp-spill"), sp_mb = fresh_dir("mr-tp-sp-mb2");
  const testing::CommandOutcome one = magic_run("--config " + config + " --out " + single);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const at::Tensor a = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  const auto learned_little = [](const std::string& output) {
    const size_t at = output.find("magic-run: warning: the model learned little beyond token frequencies: ");
    return at == std::string::npos ? std::string() : output.substr(at, output.find('\n', at) - at);
  };
  ASSERT_NE(learned_little(one.output), "") << one.output;
  struct Case {
    std::string layout, canonical, out, extra;
  };
  for (const Case& c : {Case{"dp=2,tp=2", "dp=2,tp=2", dp_tp, " --html"},
                        Case{"tp=2,mb=2", "dp=1,tp=2,mb=2", tp_mb, " --training.spill_dir " + spill},
                        Case{"dp=2,tp=2,sp,mb=2", "dp=2,tp=2,sp,mb=2", sp_mb, ""}}) {
    const testing::CommandOutcome o =
        magic_run("--config " + config + " --topology " + c.layout + " --out " + c.out + c.extra);
    ASSERT_EQ(o.exit_code, 0) << c.layout << "\n" << o.output;
    EXPECT_NE(o.output.find("on " + c.canonical), std::string::npos) << o.output;
    EXPECT_EQ(learned_little(o.output), learned_little(one.output)) << c.layout << "\n" << o.output;
    const at::Tensor d = load_safetensors(c.out + "/scores.safetensors").tensors.at("scores");
    ASSERT_EQ(d.sizes(), a.sizes());
    const double error = (d - a).abs().max().item<double>() / a.abs().max().item<double>();
    std::cout << c.layout << " vs single process: relative error " << error << "\n";
    EXPECT_LE(error, 1e-9) << c.layout;
  }
  EXPECT_TRUE(std::filesystem::exists(dp_tp + "/report.html"));
  // The finished run removed its checkpoints (every rank's folder).
  EXPECT_TRUE(!std::filesystem::exists(spill) || std::filesystem::is_empty(spill)) << spill;
  for (const std::string& dir : {single, dp_tp, tp_mb, sp_mb, spill}) std::filesystem::remove_all(dir);
}

// Per-query scores in one REPLAY pass on a mesh: a rank's step runs collectives, so its products are
// taken one at a time even when --query-batch asks for more; every query's row is the single
// process's (whose products are batched two at a time) to fp64 rounding.
TEST(MagicRunDistributed, PerQueryScoresInOnePassEqualTheSingleProcesss) {
  const std::string config = tiny_config("per-query");
  const std::string single = fresh_dir("mr-pq-single"), mesh = fresh_dir("mr-pq-mesh");
  const testing::CommandOutcome one =
      magic_run("--config " + config + " --per-query --query-batch 2 --top 0 --out " + single);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const testing::CommandOutcome o =
      magic_run("--config " + config + " --per-query --query-batch 2 --top 0 --topology dp=2,tp=2 --out " + mesh);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const at::Tensor a = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  const at::Tensor d = load_safetensors(mesh + "/scores.safetensors").tensors.at("scores");
  ASSERT_EQ(a.dim(), 2);
  ASSERT_GE(a.size(0), 2);
  ASSERT_EQ(d.sizes(), a.sizes());
  for (int64_t q = 0; q < a.size(0); ++q) {
    const double error = (d[q] - a[q]).abs().max().item<double>() / a[q].abs().max().item<double>();
    EXPECT_LE(error, 1e-9) << "query " << q;
  }
  EXPECT_FALSE(at::allclose(a[0], a[1]));  // each row is its own query's
  for (const std::string& dir : {single, mesh}) std::filesystem::remove_all(dir);
}

// The records of a tp run with sp, dumped: every one the single process makes agrees with it once
// reassembled (docs/dump-format.md), the blocks' outputs from sequence shards over tp. 13-position
// sequences make sp pad to 16 (dp=2,cp=2,tp=2) and to 4·4 (dp=2,tp=2, a zig-zag over one cp rank
// cuts it). The trace file of each rank holds its own pieces: half its columns of every block's
// output.
TEST(MagicRunDistributed, SequenceParallelDumpsEqualTheSingleProcessRecords) {
  testing::TinyRun run;
  run.max_len = 13;
  run.steps = 3;
  const std::string config = testing::write_tiny_run_config("sp-dump", run);
  const std::string single = fresh_dir("mr-sp-single"), single_dump = fresh_dir("mr-sp-single.dump");
  const testing::CommandOutcome one = magic_run("--config " + config + " --out " + single + " --dump " + single_dump);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const LoadedDump reference = read_dump(single_dump);
  for (const std::string layout : {"dp=2,tp=2,sp", "dp=2,cp=2,tp=2,sp"}) {
    const std::string out = fresh_dir("mr-sp-mesh"), dump = fresh_dir("mr-sp-mesh.dump");
    const std::string trace = fresh_dir("mr-sp-trace");
    const testing::CommandOutcome o = magic_run("--config " + config + " --topology " + layout + " --out " + out +
                                                " --dump " + dump + " --trace-file " + trace);
    ASSERT_EQ(o.exit_code, 0) << layout << "\n" << o.output;
    const LoadedDump many = read_dump(dump);
    const DumpComparison c = compare_dumps(many, reference, CompareOptions{});
    EXPECT_EQ(c.rows.size(), reference.tensors.size()) << layout;
    EXPECT_TRUE(c.passed()) << layout << ": " << c.first_divergence_line();
    size_t tp = 0;
    while (tp < many.manifest.mesh.size() && many.manifest.mesh[tp].name != "tp") ++tp;
    ASSERT_LT(tp, many.manifest.mesh.size()) << layout;
    int64_t blocks = 0;
    for (const auto& t : many.tensors) {
      const TraceRecord& r = t.record.record;
      if (r.kind != "activation") continue;
      ++blocks;
      EXPECT_EQ(placement_text(r.placements.at(tp)), "shard(1)") << layout << " " << r.name;
      EXPECT_EQ(t.whole.size(1), 13) << layout << " " << r.name;
    }
    EXPECT_GT(blocks, 0) << layout;
    // Rank 1 (tp index 1): each block output holds half of its cp rank's 16 padded columns.
    int64_t seen = 0;
    for (const nlohmann::json& m : testing::read_jsonl(trace + "/rank1.records.jsonl")) {
      if (m["type"] != "record" || m["kind"] != "activation") continue;
      const int64_t cp = layout.find("cp=2") != std::string::npos ? 2 : 1;
      EXPECT_EQ(m["shape"][1], 16 / cp / 2) << layout << " " << m.dump();
      ++seen;
    }
    EXPECT_GT(seen, 0) << layout;
    for (const std::string& dir : {out, dump, trace}) std::filesystem::remove_all(dir);
  }
  for (const std::string& dir : {single, single_dump}) std::filesystem::remove_all(dir);
}

// Layouts and flags that cannot run are refused before any rank starts (exit 2), naming the rule.
TEST(MagicRunDistributed, BadTensorParallelCombinationsAreRefusedBeforeAnyRankStarts) {
  const std::string config = tiny_config("tp-refused");
  struct Case {
    std::string args, fragment;
  };
  for (const Case& c : std::vector<Case>{
           {"--topology dp=1,tp=4",
            "--topology dp=1,tp=4: tp=4 does not divide the model's 2 attention heads (each tensor-parallel rank "
            "computes n_heads / tp whole heads)"},
           {"--topology dp=2,sp", "sp needs tp > 1"},
           {"--topology tp=2,mb=5", "mb=5 needs at least 5 rows on every dp replica"},
           {"--topology tp=4 --explain-layout", "tp=4 does not divide the model's 2 attention heads"},
           {"--explain-layout", "--explain-layout: needs --topology"},
       }) {
    const testing::CommandOutcome o = magic_run("--config " + config + " " + c.args);
    EXPECT_EQ(o.exit_code, 2) << c.args << "\n" << o.output;
    EXPECT_NE(o.output.find(c.fragment), std::string::npos) << c.args << "\n" << o.output;
    EXPECT_EQ(o.output.find("rank 0"), std::string::npos) << "started ranks: " << c.args << "\n" << o.output;
  }
}

// The comparison tool itself: a planted 1e-6 change fails it, naming the error.
TEST(MagicRunDistributed, ScoreDiffFailsOnScoresThatDiffer) {
  const std::string base = fresh_dir("diff-base"), planted = fresh_dir("diff-planted");
  std::filesystem::create_directories(base);
  std::filesystem::create_directories(planted);
  const at::Tensor scores = at::linspace(-1, 1, 10, at::kDouble);
  const std::map<std::string, std::string> ids{
      {"example_ids", "[\"0\",\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]"}};
  TensorTree t;
  t.insert("scores", scores);
  save_safetensors(base + "/scores.safetensors", t, ids);
  t.at("scores") = scores.clone();
  t.at("scores")[3] += 1e-6;
  save_safetensors(planted + "/scores.safetensors", t, ids);
  testing::CommandOutcome o = score_diff(planted, base);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("relative error 1.000e-06"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("bit-identical: no"), std::string::npos) << o.output;
  save_safetensors(planted + "/scores.safetensors", t, {{"example_ids", "[\"other\"]"}});
  EXPECT_EQ(score_diff(planted, base).exit_code, 2);
}

// Progress is on stderr under --topology as in one process (rank 0's reaches the launcher's stderr
// as it is made), and the report on stdout.
TEST(MagicRunDistributed, ProgressGoesToStderrAsInOneProcess) {
  const std::string folder = fresh_dir("mr-streams");
  std::filesystem::create_directories(folder);
  const std::string out = folder + "/stdout", err = folder + "/stderr";
  const testing::CommandOutcome o =
      magic_run("--config " + tiny_config("streams") + " --topology dp=2 --top 1 >" + out + " 2>" + err);
  ASSERT_EQ(o.exit_code, 0) << testing::read_file(err);
  const std::string stdout_text = testing::read_file(out), stderr_text = testing::read_file(err);
  for (const char* line : {"estimated time: training about ", "training: 6 steps in ", "REPLAY: 6 steps in "}) {
    EXPECT_NE(stderr_text.find(line), std::string::npos) << line << " not on stderr:\n" << stderr_text;
    EXPECT_EQ(stdout_text.find(line), std::string::npos) << line << " on stdout:\n" << stdout_text;
  }
  EXPECT_NE(stdout_text.find("Most helpful"), std::string::npos) << stdout_text;
  std::filesystem::remove_all(folder);
}

// Three-pool layouts are magic-check's decomposition workload, not a language model.
TEST(MagicRunDistributed, AThreePoolLayoutIsRefusedBeforeAnyRankStarts) {
  testing::CommandOutcome o = magic_run("--config " + tiny_config("pools") + " --topology n_ci=2,n_per_block=1");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("runs on mesh layouts"), std::string::npos) << o.output;
  o = magic_run("--config " + tiny_config("launch") + " --topology dp=2 --launch env");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--launch env: RANK is not set"), std::string::npos) << o.output;
}

// Pipeline stages (pp=2, 4 micro-batches of uneven size on a 2-layer model, clipping), and ring
// attention beside dp (cp_impl=ring): the single
// process's scores to fp64 rounding under 1F1B, and GPipe's bit for bit (each micro-batch's gradient
// is summed in micro-batch order, its second-order passes too). A model with fewer layers than
// stages is refused before any rank starts.
TEST(MagicRunDistributed, PipelinesAndRingAttentionGiveTheSingleProcessScores) {
  const std::string config = testing::write_tiny_run_config("pipeline", {}, [](nlohmann::json& j) {
    j["model"]["n_layers"] = 2;
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}, {"clip_norm", 1.0}};
  });
  const std::string single = fresh_dir("mr-pp-single"), one_f = fresh_dir("mr-pp-1f1b"),
                    gpipe = fresh_dir("mr-pp-gpipe");
  const std::string single_dump = fresh_dir("mr-pp-single.dump"), pp_dump = fresh_dir("mr-pp.dump");
  ASSERT_EQ(magic_run("--config " + config + " --out " + single + " --dump " + single_dump).exit_code, 0);
  const testing::CommandOutcome o =
      magic_run("--config " + config + " --topology pp=2,mb=4 --out " + one_f + " --dump " + pp_dump);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("on dp=1,pp=2,mb=4"), std::string::npos) << o.output;
  const testing::CommandOutcome g =
      magic_run("--config " + config + " --topology pp=2,mb=4 --schedule gpipe --out " + gpipe);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const at::Tensor a = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  const at::Tensor d = load_safetensors(one_f + "/scores.safetensors").tensors.at("scores");
  const at::Tensor e = load_safetensors(gpipe + "/scores.safetensors").tensors.at("scores");
  const double error = (d - a).abs().max().item<double>() / a.abs().max().item<double>();
  std::cout << "pp=2,mb=4 vs single process: relative error " << error << "\n";
  EXPECT_LE(error, 1e-10);
  EXPECT_TRUE(at::equal(d, e)) << "GPipe's scores differ from 1F1B's";
  // Its dump: each stage's records held on its stage (format version 4), every record the single
  // process also makes equal to it.
  const LoadedDump one = read_dump(single_dump), stages = read_dump(pp_dump);
  EXPECT_EQ(stages.manifest.version, 4);
  std::set<std::string> held_on;
  for (const auto& t : stages.tensors) {
    const TraceRecord& r = t.record.record;
    if (r.kind == "reduced_gradient" && r.step == 0) held_on.insert(r.name + " on " + placement_text(r.placements[0]));
  }
  EXPECT_EQ(held_on.count("blocks.0.ln1.weight on replicate on 0"), 1u);
  EXPECT_EQ(held_on.count("blocks.1.ln1.weight on replicate on 1"), 1u);
  CompareOptions common;
  common.common_only = true;
  const DumpComparison c = compare_dumps(stages, one, common);
  EXPECT_GT(c.rows.size(), 50u);
  EXPECT_TRUE(c.passed()) << c.first_divergence_line();
  std::cout << "pp=2,mb=4 dump vs single process: " << c.rows.size() << " common records, worst " << c.earlier_agreement
            << "\n";
  // Ring attention beside dp: the same scores.
  const std::string ring = fresh_dir("mr-ring");
  const testing::CommandOutcome r =
      magic_run("--config " + config + " --topology dp=2,cp=2,cp_impl=ring --out " + ring);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const at::Tensor rs = load_safetensors(ring + "/scores.safetensors").tensors.at("scores");
  const double ring_error = (rs - a).abs().max().item<double>() / a.abs().max().item<double>();
  std::cout << "dp=2,cp=2,cp_impl=ring vs single process: relative error " << ring_error << "\n";
  EXPECT_LE(ring_error, 1e-10);
  std::filesystem::remove_all(ring);

  const std::string never = fresh_dir("mr-pp-never");
  const std::string one_layer = testing::write_tiny_run_config("pipeline-one-layer", {});
  const testing::CommandOutcome refused = magic_run("--config " + one_layer + " --topology pp=2,mb=2 --out " + never);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("pp=2 stages for a model of 1 layer;"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(never));
  for (const std::string& dir : {single, one_f, gpipe, single_dump, pp_dump}) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace magic
