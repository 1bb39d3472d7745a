// The trace layer and the dump format (lib/trace, docs/dump-format.md): trace points, the dump
// sink's files read back, reassembly by placements, and the comparison of two dumps with its
// first divergence. Expected wholes and index ranges are built here by hand from the format's
// definitions, not by the reader under test.
#include <gtest/gtest.h>

#include <filesystem>

#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "lib/trace/compare_report.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/dump_sink.h"
#include "lib/trace/reassemble.h"
#include "lib/trace/score_dump.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

at::Tensor ramp(std::vector<int64_t> shape, double offset = 0.0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kDouble) * 0.37 + offset).sin().reshape(shape);
}

std::string fresh_folder(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / name;
  fs::remove_all(p);
  return p.string();
}

TraceRecord record(const std::string& name, const std::string& kind, const std::string& phase, int64_t step,
                   std::vector<Placement> placements = {}) {
  return {name,
          kind,
          phase,
          kind == "gradient" || kind == "reduced_gradient" ? "first" : "forward",
          step,
          "",
          std::move(placements)};
}

// A mesh dp=2 (outer), cp=3 (inner); rank = dp * 3 + cp.
const std::vector<MeshDim> kMesh = {{"dp", 2}, {"cp", 3}};
std::vector<std::vector<int64_t>> mesh_coords() {
  std::vector<std::vector<int64_t>> c;
  for (int64_t dp = 0; dp < 2; ++dp)
    for (int64_t cp = 0; cp < 3; ++cp) c.push_back({dp, cp});
  return c;
}

// Rank pieces of `whole` [B, T, ...] for shard(0) over dp with rows {3, 2} (uneven) and
// zigzag(1) over cp: T = 6 chunks, cp rank i holds chunks i and 5 - i.
std::vector<at::Tensor> batch_sequence_pieces(const at::Tensor& whole) {
  const int64_t chunk = whole.size(1) / 6;
  std::vector<at::Tensor> pieces;
  for (const auto& c : mesh_coords()) {
    const at::Tensor rows = c[0] == 0 ? whole.narrow(0, 0, 3) : whole.narrow(0, 3, whole.size(0) - 3);
    pieces.push_back(at::cat({rows.narrow(1, c[1] * chunk, chunk), rows.narrow(1, (5 - c[1]) * chunk, chunk)}, 1));
  }
  return pieces;
}

// Writes a dump of dp=2,cp=3 ranks whose pieces `pieces_of` gives for each record.
void write_mesh_dump(const std::string& folder, const std::vector<TraceRecord>& records,
                     const std::vector<std::vector<at::Tensor>>& pieces_by_record) {
  for (size_t r = 0; r < 6; ++r) {
    std::vector<DumpSink::Entry> entries;
    for (size_t i = 0; i < records.size(); ++i) entries.push_back({records[i], pieces_by_record[i][r]});
    write_dump_rank_file(folder, static_cast<int64_t>(r), entries);
  }
  write_dump_manifest(folder, "mesh", kMesh, mesh_coords(), records);
}

TEST(TracePoint, BuildsNoRecordWithoutASinkAndRestoresThePreviousSink) {
  int built = 0;
  auto make = [&] {
    ++built;
    return record("hidden", "activation", "forward", 0);
  };
  trace_point(at::ones({2}), make);
  EXPECT_EQ(built, 0);
  EXPECT_FALSE(tracing());
  DumpSink outer, inner;
  {
    ScopedTraceSink a(&outer);
    {
      ScopedTraceSink b(&inner);
      trace_point(at::ones({2}), make);
    }
    trace_point(at::ones({3}), [] { return record("logits", "logits", "forward", 0); });
  }
  EXPECT_FALSE(tracing());
  EXPECT_EQ(built, 1);
  ASSERT_EQ(inner.entries().size(), 1u);
  ASSERT_EQ(outer.entries().size(), 1u);
  EXPECT_EQ(outer.entries()[0].record.name, "logits");
}

TEST(TracePoint, TheSinkKeepsACopyAndLeavesTheGraphAlone) {
  DumpSink sink;
  at::Tensor x = at::ones({3}, at::kDouble).requires_grad_();
  at::Tensor y = x * 2;
  {
    ScopedTraceSink scope(&sink);
    trace_point(y, [] { return record("y", "activation", "forward", 0); });
  }
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 2.0, at::kDouble)));
  const at::Tensor kept = sink.entries()[0].tensor;
  EXPECT_FALSE(kept.requires_grad());
  y.detach().mul_(10);  // the run changing its tensor later does not change the record
  EXPECT_TRUE(at::equal(kept, at::full({3}, 2.0, at::kDouble)));
  sink.write(record("y", "activation", "forward", 0), y * 3);  // made again: the first is kept
  ASSERT_EQ(sink.entries().size(), 1u);
  EXPECT_TRUE(at::equal(sink.entries()[0].tensor, at::full({3}, 2.0, at::kDouble)));
}

TEST(DumpFormat, ASingleProcessDumpReadsBackAsWritten) {
  const std::string folder = fresh_folder("single.dump");
  DumpSink sink;
  {
    ScopedTraceSink scope(&sink);
    trace_point(at::arange(6, at::kLong).reshape({2, 3}), [] { return record("input_ids", "input", "forward", 0); });
    trace_point(ramp({2, 3, 4}), [] { return record("blocks.0", "activation", "forward", 0); });
    trace_point(ramp({4, 4}).to(at::kFloat), [] { return record("w", "gradient", "backward", 0); });
  }
  write_single_process_dump(folder, "one", sink.entries());
  const LoadedDump dump = read_dump(folder);
  EXPECT_EQ(dump.manifest.run, "one");
  EXPECT_TRUE(dump.manifest.mesh.empty());
  ASSERT_EQ(dump.tensors.size(), 3u);
  EXPECT_EQ(dump.tensors[0].record.record.name, "input_ids");
  EXPECT_TRUE(at::equal(dump.tensors[0].whole, at::arange(6, at::kLong).reshape({2, 3})));
  EXPECT_TRUE(at::equal(dump.tensors[1].whole, ramp({2, 3, 4})));
  EXPECT_EQ(dump.tensors[2].record.dtype, c10::kFloat);
  EXPECT_EQ(dump.tensors[2].record.record.order, "first");
}

TEST(DumpFormat, UnevenShardsAndZigzagPairsReassembleToTheWhole) {
  const std::string folder = fresh_folder("mesh.dump");
  const at::Tensor hidden = ramp({5, 12, 4});
  const at::Tensor grad = ramp({7, 3}, 1.0);
  // The gradient is a partial sum over cp of replicas over dp: terms g/3 + (k-1)·e that sum to g.
  std::vector<at::Tensor> grad_pieces;
  for (const auto& c : mesh_coords()) grad_pieces.push_back(grad / 3 + (c[1] - 1) * at::ones({7, 3}, at::kDouble));
  std::vector<at::Tensor> mean_pieces;  // avg over both: each rank holds the whole plus an offset that averages out
  for (size_t r = 0; r < 6; ++r) mean_pieces.push_back(grad + (static_cast<double>(r) - 2.5));
  write_mesh_dump(
      folder,
      {record("hidden", "activation", "forward", 0, {Placement::shard(0), Placement::zigzag(1)}),
       record("w", "gradient", "backward", 0, {Placement::replicate(), Placement::partial(Placement::Reduce::kSum)}),
       record("w", "reduced_gradient", "reduction", 0,
              {Placement::partial(Placement::Reduce::kAvg), Placement::partial(Placement::Reduce::kAvg)})},
      {batch_sequence_pieces(hidden), grad_pieces, mean_pieces});
  const LoadedDump dump = read_dump(folder);
  ASSERT_EQ(dump.tensors.size(), 3u);
  EXPECT_TRUE(at::equal(dump.tensors[0].whole, hidden));
  EXPECT_EQ(dump.tensors[0].record.shape, (std::vector<int64_t>{5, 12, 4}));
  EXPECT_TRUE(at::allclose(dump.tensors[1].whole, grad, 0, 1e-15));
  EXPECT_TRUE(dump.tensors[1].replicas_differ.empty());
  EXPECT_TRUE(at::allclose(dump.tensors[2].whole, grad, 0, 1e-14));
}

TEST(DumpFormat, ReplicasThatDifferAreReported) {
  std::vector<at::Tensor> pieces(6, ramp({4}));
  pieces[4] = pieces[4] * 1.5;  // dp 1, cp 1
  const Reassembled r = reassemble(kMesh, mesh_coords(), pieces, {Placement::replicate(), Placement::replicate()});
  EXPECT_NE(r.replicas_differ.find("replicas differ"), std::string::npos) << r.replicas_differ;
  EXPECT_NEAR(r.replica_spread, 0.5, 1e-12);
}

TEST(DumpFormat, PiecesThatDoNotTileAreRefusedSayingWhy) {
  auto refusal = [](std::vector<at::Tensor> pieces, std::vector<Placement> placements) {
    return testing::input_error_of([&] { reassemble(kMesh, mesh_coords(), pieces, placements); });
  };
  std::vector<at::Tensor> odd(6, ramp({2, 5}));
  EXPECT_NE(refusal(odd, {Placement::replicate(), Placement::zigzag(1)}).find("even"), std::string::npos);
  std::vector<at::Tensor> ragged(6, ramp({2, 4}));
  ragged[2] = ramp({3, 4});
  EXPECT_NE(refusal(ragged, {Placement::replicate(), Placement::shard(1)}).find("differ outside dimension 1"),
            std::string::npos);
  EXPECT_NE(refusal(ragged, {Placement::replicate(), Placement::partial(Placement::Reduce::kSum)}).find("shapes"),
            std::string::npos);
  EXPECT_NE(refusal(odd, {Placement::shard(2), Placement::replicate()}).find("shard(2)"), std::string::npos);
}

// The candidate: the reference's pieces with rank (dp 1, cp 1)'s piece of the hidden states
// scaled, and the gradient scaled by dp everywhere.
struct TwoDumps {
  LoadedDump candidate, reference;
};
TwoDumps planted_dumps(double piece_factor, double grad_factor) {
  const at::Tensor hidden = ramp({5, 12, 4}), grad = ramp({7, 3}, 1.0), loss = at::full({}, 2.5, at::kDouble);
  const std::vector<TraceRecord> records = {
      record("loss", "loss", "forward", 0,
             {Placement::partial(Placement::Reduce::kSum), Placement::partial(Placement::Reduce::kSum)}),
      record("hidden", "activation", "forward", 0, {Placement::shard(0), Placement::zigzag(1)}),
      record("w", "reduced_gradient", "reduction", 0, {Placement::replicate(), Placement::replicate()})};
  const std::string ref_folder = fresh_folder("reference.dump"), cand_folder = fresh_folder("candidate.dump");
  write_single_process_dump(ref_folder, "reference",
                            {{record("loss", "loss", "forward", 0), loss},
                             {record("hidden", "activation", "forward", 0), hidden},
                             {record("w", "reduced_gradient", "reduction", 0), grad}});
  std::vector<at::Tensor> hidden_pieces = batch_sequence_pieces(hidden);
  hidden_pieces[4] = hidden_pieces[4] * piece_factor;
  write_mesh_dump(
      cand_folder, records,
      {std::vector<at::Tensor>(6, loss / 6), hidden_pieces, std::vector<at::Tensor>(6, grad * grad_factor)});
  return {read_dump(cand_folder), read_dump(ref_folder)};
}

TEST(DumpComparison, EqualRunsPass) {
  const TwoDumps d = planted_dumps(1.0, 1.0);
  const DumpComparison c = compare_dumps(d.candidate, d.reference, {});
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_TRUE(c.passed());
  EXPECT_LE(c.earlier_agreement, 1e-15);
  EXPECT_EQ(c.first_divergence_line(), "");
}

TEST(DumpComparison, TheFirstDivergenceIsTheEarliestFailingRecordAndSaysWhichPieceIsOff) {
  const TwoDumps d = planted_dumps(3.0, 2.0);
  const DumpComparison c = compare_dumps(d.candidate, d.reference, {});
  ASSERT_TRUE(c.first_divergence);
  EXPECT_EQ(*c.first_divergence, 1u);
  // dp 1 holds rows 3..4; cp rank 1 of T = 12 in 6 chunks of 2 holds chunks 1 and 4: positions 2..3, 8..9.
  EXPECT_EQ(c.rows[1].where, "on dp rank 1, cp rank 1 (dim 0 indices 3..4; positions 2..3, 8..9)");
  EXPECT_FALSE(c.rows[2].row.passed);
  EXPECT_EQ(c.rows[2].row.diagnosis.factor, "x dp");
  EXPECT_EQ(c.rows[2].where, "");  // replicated: every piece is off
  const std::string line = c.first_divergence_line();
  EXPECT_EQ(line.rfind("first divergence: step 0, forward, hidden activation on dp rank 1, cp rank 1", 0), 0u) << line;
  EXPECT_NE(line.find("every earlier record agrees to"), std::string::npos) << line;
}

// Issue 43: rows after the first divergence read "terms missing or extra, not a scaling" though
// they may be off only because the first one is. The first keeps its diagnosis; a later row that
// names no factor says what it follows (its statistics kept); a later factor stays as it is.
TEST(DumpComparison, RowsAfterTheFirstDivergenceSayTheyFollowIt) {
  const std::string a = fresh_folder("downstream-candidate.dump"), b = fresh_folder("downstream-reference.dump");
  const at::Tensor hidden = ramp({4, 6}), w = ramp({7, 3}, 1.0), v = ramp({5}, 2.0);
  write_single_process_dump(b, "reference",
                            {{record("hidden", "activation", "forward", 0), hidden},
                             {record("w", "reduced_gradient", "reduction", 0), w},
                             {record("v", "reduced_gradient", "reduction", 0), v}});
  write_single_process_dump(a, "candidate",
                            {{record("hidden", "activation", "forward", 0), hidden.roll(1, 1)},
                             {record("w", "reduced_gradient", "reduction", 0), w + 0.3 * w.roll(1, 0)},
                             {record("v", "reduced_gradient", "reduction", 0), 2.0 * v}});
  CompareOptions options;
  options.factor_sizes = std::vector<std::pair<std::string, int64_t>>{{"dp", 2}};
  const DumpComparison c = compare_dumps(read_dump(a), read_dump(b), options);
  ASSERT_EQ(c.rows.size(), 3u);
  ASSERT_EQ(c.first_divergence, std::optional<size_t>(0));
  EXPECT_FALSE(c.rows[0].after_first_divergence);
  EXPECT_NE(c.rows[0].row.diagnosis.text.find("terms missing or extra, not a scaling"), std::string::npos)
      << "the first divergence keeps its diagnosis: " << c.rows[0].row.diagnosis.text;
  const std::string& later = c.rows[1].row.diagnosis.text;
  EXPECT_TRUE(c.rows[1].after_first_divergence);
  EXPECT_EQ(later.rfind("direction differs (cosine ", 0), 0u) << later;
  EXPECT_NE(later.find("): after the first divergence (step 0, forward, hidden activation)"), std::string::npos)
      << later;
  EXPECT_EQ(later.find("terms missing or extra"), std::string::npos) << later;
  EXPECT_TRUE(c.rows[2].after_first_divergence);
  EXPECT_EQ(c.rows[2].row.diagnosis.factor, "x dp") << c.rows[2].row.diagnosis.text;
  EXPECT_EQ(c.rows[2].row.diagnosis.text, "x dp (scale 2.000000)");
  EXPECT_EQ(compare_report_json(CompareReport{"a", "b", "", "", c, 0.0, ""})["records"][1]["after_first_divergence"],
            true);
}

TEST(DumpComparison, MissingExtraAndReshapedRecordsFail) {
  const std::string a = fresh_folder("a.dump"), b = fresh_folder("b.dump");
  write_single_process_dump(
      a, "a",
      {{record("x", "activation", "forward", 0), ramp({3})}, {record("extra", "activation", "forward", 0), ramp({2})}});
  write_single_process_dump(b, "b",
                            {{record("x", "activation", "forward", 0), ramp({4})},
                             {record("missing", "activation", "forward", 0), ramp({2})}});
  const DumpComparison c = compare_dumps(read_dump(a), read_dump(b), {});
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_NE(c.rows[0].row.diagnosis.text.find("shape"), std::string::npos);
  EXPECT_NE(c.rows[1].row.diagnosis.text.find("missing from"), std::string::npos);
  EXPECT_EQ(c.rows[2].record.name, "extra");
  EXPECT_NE(c.rows[2].row.diagnosis.text.find("not in the reference"), std::string::npos);
  EXPECT_EQ(c.first_divergence, std::optional<size_t>(0));
  EXPECT_EQ(c.first_divergence_line().find("it is the first record") != std::string::npos, true);
  EXPECT_EQ(record_place(record("loss", "loss", "forward", 0)), "step 0, forward, loss");
}

TEST(DumpComparison, ScoreFilesJoinOnExampleIds) {
  const std::string a = fresh_folder("a-scores"), b = fresh_folder("b-scores");
  fs::create_directories(a);
  fs::create_directories(b);
  TensorTree ta, tb;
  ta.insert("scores", at::tensor({3.0, 1.0, 2.0}, at::kDouble));
  tb.insert("scores", at::tensor({1.0, 2.0, 3.0}, at::kDouble));
  save_safetensors(a + "/scores.safetensors", ta, {{"example_ids", R"(["c","a","b"])"}});
  save_safetensors(b + "/scores.safetensors", tb, {{"example_ids", R"(["a","b","c"])"}});
  const ScoreDump sa = read_score_dump(a), sb = read_score_dump(b);
  EXPECT_TRUE(compare_dumps(aligned_scores(sa, sb), sb.dump, {}).passed());
  save_safetensors(a + "/scores.safetensors", ta, {{"example_ids", R"(["c","a","d"])"}});
  EXPECT_NE(testing::input_error_of([&] { aligned_scores(read_score_dump(a), sb); }).find("no example 'b'"),
            std::string::npos);
}

}  // namespace
}  // namespace magic
