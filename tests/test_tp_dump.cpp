// The dump format's tensor-parallel placements and micro-batches (docs/dump-format.md): fused and
// padded shards, hidden- and head-dimension shards, partial sums of row-parallel outputs, the
// micro_batch field (version 2, version 1 still read), what a reader refuses of them, and what the
// comparison names: the tp rank of a piece that is off, the micro-batch, replicas left unreduced.
// Expected wholes are built here by hand from the format's definitions, not by the reader under test.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/trace/compare_report.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_manifest.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/dump_sink.h"
#include "lib/trace/reassemble.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

at::Tensor ramp(std::vector<int64_t> shape, double offset = 0.0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kDouble) * 0.37 + offset).sin().reshape(shape);
}

at::Tensor rows(const at::Tensor& t, std::vector<int64_t> which) {
  return t.index_select(0, at::tensor(which, at::kLong));
}

std::string fresh_folder(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / name;
  fs::remove_all(p);
  return p.string();
}

const std::vector<MeshDim> kTp = {{"tp", 2}};
const std::vector<std::vector<int64_t>> kTpCoords = {{0}, {1}};
// dp=2 (outer) x tp=2; rank = dp * 2 + tp.
const std::vector<MeshDim> kDpTp = {{"dp", 2}, {"tp", 2}};
const std::vector<std::vector<int64_t>> kDpTpCoords = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};

TEST(TensorParallelPlacements, AFusedShardTakesEachRanksShareOfEveryPart) {
  // A fused [q; k; v] weight of 3 parts of 3 rows, each part split 2 + 1 over tp (uneven heads):
  // tp 0 holds rows 0,1 | 3,4 | 6,7 and tp 1 rows 2 | 5 | 8, each in part order.
  const at::Tensor qkv = ramp({9, 2});
  const Reassembled r =
      reassemble(kTp, kTpCoords, {rows(qkv, {0, 1, 3, 4, 6, 7}), rows(qkv, {2, 5, 8})}, {Placement::shard(0, 0, 3)});
  EXPECT_TRUE(at::equal(r.whole, qkv));
  // Its bias, and a part split along dim 1.
  const at::Tensor bias = ramp({6});
  EXPECT_TRUE(at::equal(
      reassemble(kTp, kTpCoords, {rows(bias, {0, 2, 4}), rows(bias, {1, 3, 5})}, {Placement::shard(0, 0, 3)}).whole,
      bias));
  const at::Tensor wide = ramp({2, 4});
  EXPECT_TRUE(at::equal(reassemble(kTp, kTpCoords,
                                   {wide.index_select(1, at::tensor({0, 2}, at::kLong)),
                                    wide.index_select(1, at::tensor({1, 3}, at::kLong))},
                                   {Placement::shard(1, 0, 2)})
                            .whole,
                        wide));
}

TEST(TensorParallelPlacements, APaddedShardDropsThePaddingAtTheEnd) {
  // A vocabulary of 5 rows padded to 6 over tp = 2: 3 rows each, the last of tp 1 padding.
  const at::Tensor vocab = ramp({5, 3});
  const at::Tensor padded = at::cat({vocab, at::full({1, 3}, 99.0, at::kDouble)});
  const Reassembled r =
      reassemble(kTp, kTpCoords, {padded.narrow(0, 0, 3), padded.narrow(0, 3, 3)}, {Placement::shard(0, 5)});
  EXPECT_TRUE(at::equal(r.whole, vocab));
}

// fsdp shards each tensor-parallel piece on dim 0: tp cuts first, so tp is the outer mesh
// dimension and the reader joins each piece's fsdp shards before the pieces (docs/dump-format.md,
// "Placements"). Built by hand: whole -> tp piece -> fsdp shard (torch.chunk, uneven allowed).
TEST(TensorParallelPlacements, AnFsdpShardOfATensorParallelPieceIsJoinedBeforeTheTpPieces) {
  const std::vector<MeshDim> tp_fsdp = {{"tp", 2}, {"fsdp", 2}};
  const std::vector<std::vector<int64_t>> coords = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  // Column-parallel [8, 2]: tp t holds rows 4t..4t+3, its fsdp f rows 4t+2f, 4t+2f+1.
  const at::Tensor w = ramp({8, 2});
  const std::vector<at::Tensor> colwise = {rows(w, {0, 1}), rows(w, {2, 3}), rows(w, {4, 5}), rows(w, {6, 7})};
  const std::vector<Placement> both = {Placement::shard(0), Placement::shard(0)};
  EXPECT_TRUE(at::equal(reassemble(tp_fsdp, coords, colwise, both).whole, w));
  // The same pieces on a mesh that lists fsdp outside tp interleave the rows (0,1,4,5,2,3,6,7).
  const std::vector<MeshDim> fsdp_tp = {{"fsdp", 2}, {"tp", 2}};
  const std::vector<std::vector<int64_t>> swapped = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  const at::Tensor wrong = reassemble(fsdp_tp, swapped, colwise, both).whole;
  EXPECT_TRUE(at::equal(wrong, rows(w, {0, 1, 4, 5, 2, 3, 6, 7})));
  // Fused q|k|v [12, 2] of parts of 4 rows: tp t holds rows 2t, 2t+1 of each part (6 rows),
  // split 3 + 3 over fsdp across the parts' boundaries.
  const at::Tensor qkv = ramp({12, 2}, 0.2);
  const std::vector<at::Tensor> fused = {rows(qkv, {0, 1, 4}), rows(qkv, {5, 8, 9}), rows(qkv, {2, 3, 6}),
                                         rows(qkv, {7, 10, 11})};
  EXPECT_TRUE(
      at::equal(reassemble(tp_fsdp, coords, fused, {Placement::shard(0, 0, 3), Placement::shard(0)}).whole, qkv));
  // A vocabulary of 5 rows padded to 6: tp pieces of 3 rows (tp 1's last is padding), each split
  // 2 + 1 over fsdp.
  const at::Tensor vocab = ramp({5, 3}, 0.7);
  const at::Tensor pad = at::zeros({1, 3}, at::kDouble);
  const std::vector<at::Tensor> padded = {rows(vocab, {0, 1}), rows(vocab, {2}), rows(vocab, {3, 4}), pad};
  EXPECT_TRUE(
      at::equal(reassemble(tp_fsdp, coords, padded, {Placement::shard(0, 5), Placement::shard(0)}).whole, vocab));
}

TEST(TensorParallelPlacements, HiddenAndHeadShardsAndRowParallelPartialSumsReassemble) {
  // Column-parallel fc output [b, s, 6]: rows over dp, hidden units over tp.
  const at::Tensor fc = ramp({2, 3, 6});
  // Per-head attention [b, 4 heads, s, head_dim]: rows over dp, heads over tp.
  const at::Tensor ctx = ramp({2, 4, 3, 2}, 0.5);
  // A row-parallel layer: x [b, s, 4] @ w [5, 4]^T, each tp rank multiplying its 2 input columns.
  const at::Tensor x = ramp({2, 3, 4}, 1.0), w = ramp({5, 4}, 2.0);
  std::vector<at::Tensor> fc_pieces, ctx_pieces, out_pieces;
  for (const auto& c : kDpTpCoords) {
    fc_pieces.push_back(fc.narrow(0, c[0], 1).narrow(2, 3 * c[1], 3));
    ctx_pieces.push_back(ctx.narrow(0, c[0], 1).narrow(1, 2 * c[1], 2));
    out_pieces.push_back(at::matmul(x.narrow(0, c[0], 1).narrow(2, 2 * c[1], 2), w.narrow(1, 2 * c[1], 2).t()));
  }
  EXPECT_TRUE(
      at::equal(reassemble(kDpTp, kDpTpCoords, fc_pieces, {Placement::shard(0), Placement::shard(2)}).whole, fc));
  EXPECT_TRUE(
      at::equal(reassemble(kDpTp, kDpTpCoords, ctx_pieces, {Placement::shard(0), Placement::shard(1)}).whole, ctx));
  const at::Tensor out =
      reassemble(kDpTp, kDpTpCoords, out_pieces, {Placement::shard(0), Placement::partial(Placement::Reduce::kSum)})
          .whole;
  EXPECT_TRUE(at::allclose(out, at::matmul(x, w.t()), 0, 1e-14));
}

TEST(TensorParallelPlacements, PiecesThatDoNotFitAFusedOrPaddedShardAreRefusedSayingWhy) {
  const std::string fused = testing::input_error_of([] {
    reassemble(kTp, kTpCoords, {ramp({4, 2}), ramp({3, 2})}, {Placement::shard(0, 0, 3)});
  });
  EXPECT_NE(fused.find("tp 0's piece has shape [4, 2], whose dimension 0 does not split into 3 equal parts"),
            std::string::npos)
      << fused;
  const std::string padded = testing::input_error_of([] {
    reassemble(kTp, kTpCoords, {ramp({2, 2}), ramp({2, 2})}, {Placement::shard(0, 5)});
  });
  EXPECT_NE(padded.find("shard(0, length 5) along tp: the pieces make 4 entries, fewer than the length"),
            std::string::npos)
      << padded;
}

// A manifest of one record of shape [6, 2] on a tp=2 mesh, with `placement` and the record's
// extra fields, at `version`.
std::string manifest_text(int version, const nlohmann::json& placement, const nlohmann::json& extra = {}) {
  nlohmann::json record = {{"key", "r0"},         {"name", "w"},
                           {"kind", "parameter"}, {"phase", "optimizer"},
                           {"order", "first"},    {"step", 0},
                           {"layer", ""},         {"dtype", "F64"},
                           {"shape", {6, 2}},     {"placements", nlohmann::json::array({placement})}};
  if (version >= 2) record["micro_batch"] = -1;
  for (const auto& [k, v] : extra.items()) {
    if (v.is_null()) {
      record.erase(k);
    } else {
      record[k] = v;
    }
  }
  return nlohmann::json{{"format", "magic-dump"},
                        {"version", version},
                        {"run", "t"},
                        {"mesh", {{{"name", "tp"}, {"size", 2}}}},
                        {"ranks",
                         {{{"rank", 0}, {"coords", {0}}, {"file", "rank0.safetensors"}},
                          {{"rank", 1}, {"coords", {1}}, {"file", "rank1.safetensors"}}}},
                        {"records", {record}}}
      .dump();
}

TEST(TensorParallelPlacements, TheManifestReadsFusedAndPaddedShardsAndTheMicroBatch) {
  const DumpManifest fused = parse_dump_manifest(
      manifest_text(2, {{"type", "shard"}, {"dim", 0}, {"parts", 3}}, {{"micro_batch", 1}}), "m.json");
  const Placement& p = fused.records[0].record.placements[0];
  EXPECT_EQ(p.type, Placement::Type::kShard);
  EXPECT_EQ(p.parts, 3);
  EXPECT_EQ(fused.records[0].record.micro_batch, 1);
  const DumpManifest padded =
      parse_dump_manifest(manifest_text(2, {{"type", "shard"}, {"dim", 0}, {"length", 5}}), "m.json");
  EXPECT_EQ(padded.records[0].record.placements[0].length, 5);
  // Written back as read.
  const nlohmann::json back = nlohmann::json::parse(dump_manifest_json(fused));
  EXPECT_EQ(back["version"], 2);
  EXPECT_EQ(back["records"][0]["placements"][0], (nlohmann::json{{"type", "shard"}, {"dim", 0}, {"parts", 3}}));
  EXPECT_EQ(back["records"][0]["micro_batch"], 1);
  // Version 1 has no micro_batch: its records are whole steps.
  const DumpManifest v1 = parse_dump_manifest(manifest_text(1, {{"type", "shard"}, {"dim", 0}}), "m.json");
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v1.records[0].record.micro_batch, -1);
}

TEST(TensorParallelPlacements, MalformedPlacementsAndMicroBatchesAreRefusedByName) {
  const auto shard_with = [](const nlohmann::json& fields) {
    nlohmann::json p = {{"type", "shard"}, {"dim", 0}};
    p.update(fields);
    return p;
  };
  const auto version_5 = [](const std::string& text) {
    nlohmann::json m = nlohmann::json::parse(text);
    m["version"] = 5;
    return m.dump();
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"parts 0", manifest_text(2, shard_with({{"parts", 0}})), "records[0].placements[0].parts: expected 1 to"},
      {"parts a string", manifest_text(2, shard_with({{"parts", "3"}})), "records[0].placements[0].parts"},
      {"length 0", manifest_text(2, shard_with({{"length", 0}})), "records[0].placements[0].length: expected 1 to"},
      {"parts and length", manifest_text(2, shard_with({{"parts", 3}, {"length", 5}})),
       "records[0].placements[0].parts: a fused shard (parts) takes no length"},
      {"parts on a zigzag", manifest_text(2, {{"type", "zigzag"}, {"dim", 0}, {"parts", 3}}),
       "records[0].placements[0]"},
      {"parts in version 1", manifest_text(1, shard_with({{"parts", 3}})),
       "records[0].placements[0].parts: a shard's length or parts needs version 2"},
      {"length in version 1", manifest_text(1, shard_with({{"length", 5}})),
       "records[0].placements[0].length: a shard's length or parts needs version 2"},
      {"micro_batch missing", manifest_text(2, shard_with(nlohmann::json::object()), {{"micro_batch", nullptr}}),
       "records[0].micro_batch"},
      {"micro_batch -2", manifest_text(2, shard_with(nlohmann::json::object()), {{"micro_batch", -2}}),
       "records[0].micro_batch: expected -1 to"},
      {"micro_batch in version 1", manifest_text(1, shard_with(nlohmann::json::object()), {{"micro_batch", 0}}),
       "micro_batch"},
      {"version 5", version_5(manifest_text(2, shard_with(nlohmann::json::object()))),
       "version: unknown version 5 (this reader reads versions 1 to 4)"},
  };
  for (const auto& [what, text, expected] : cases) {
    const std::string error = testing::input_error_of([&] { parse_dump_manifest(text, "m.json"); });
    EXPECT_EQ(error.rfind("m.json: ", 0), 0u) << what << ": " << error;
    EXPECT_NE(error.find(expected), std::string::npos) << what << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << what;
  }
}

TraceRecord record(const std::string& name, const std::string& kind, int64_t micro_batch,
                   std::vector<Placement> placements = {}) {
  const bool gradient = kind == "reduced_gradient";
  return {name,       kind,       gradient ? "reduction" : "forward", gradient ? "first" : "forward", 0, "",
          placements, micro_batch};
}

void write_mesh(const std::string& folder, const std::vector<MeshDim>& mesh,
                const std::vector<std::vector<int64_t>>& coords, const std::vector<TraceRecord>& records,
                const std::vector<std::vector<at::Tensor>>& pieces_by_record) {
  for (size_t r = 0; r < coords.size(); ++r) {
    std::vector<DumpSink::Entry> entries;
    for (size_t i = 0; i < records.size(); ++i) entries.push_back({records[i], pieces_by_record[i][r]});
    write_dump_rank_file(folder, static_cast<int64_t>(r), entries);
  }
  write_dump_manifest(folder, "tp", mesh, coords, records);
}

TEST(TensorParallelComparison, RecordsOfTwoMicroBatchesAreTwoTensorsAndTheFirstDivergenceNamesTheMicroBatch) {
  const std::string ref = fresh_folder("tp-mb-reference.dump"), cand = fresh_folder("tp-mb-candidate.dump");
  const at::Tensor l0 = at::full({}, 1.25, at::kDouble), l1 = at::full({}, 0.75, at::kDouble);
  write_single_process_dump(ref, "reference", {{record("loss", "loss", 0), l0}, {record("loss", "loss", 1), l1}});
  // dp partial sums of each micro-batch's loss; micro-batch 1's off by 1.3 (no factor of the mesh), replicated over tp.
  const std::vector<Placement> loss = {Placement::partial(Placement::Reduce::kSum), Placement::replicate()};
  write_mesh(cand, kDpTp, kDpTpCoords, {record("loss", "loss", 0, loss), record("loss", "loss", 1, loss)},
             {std::vector<at::Tensor>(4, l0 / 2), std::vector<at::Tensor>(4, l1 * 0.65)});
  const DumpComparison c = compare_dumps(read_dump(cand), read_dump(ref), {});
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_TRUE(c.rows[0].row.passed);
  ASSERT_EQ(c.first_divergence, std::optional<size_t>(1));
  EXPECT_EQ(c.rows[1].record.micro_batch, 1);
  const std::string line = c.first_divergence_line();
  EXPECT_EQ(line.rfind("first divergence: step 0, micro-batch 1, forward, loss, scale 1.300000, no topology factor", 0),
            0u)
      << line;
  std::ostringstream table;
  print_compare_report(CompareReport{cand, ref, "dp=2,tp=2, 4 ranks", "single process", c, 0.0, ""}, table);
  EXPECT_NE(table.str().find("step  mb  phase"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("\n0     1   forward"), std::string::npos) << table.str();
  const auto json = compare_report_json(CompareReport{cand, ref, "", "", c, 0.0, ""});
  EXPECT_EQ(json["first_divergence"]["micro_batch"], 1);
  EXPECT_EQ(json["records"][0]["micro_batch"], 0);
}

TEST(TensorParallelComparison, AShardOffOnOneTpRankIsNamedWithTheIndicesItHolds) {
  // The fused qkv weight of AFusedShardTakesEachRanksShareOfEveryPart, tp 1's piece off.
  const std::string ref = fresh_folder("tp-where-reference.dump"), cand = fresh_folder("tp-where-candidate.dump");
  const at::Tensor qkv = ramp({9, 2});
  write_single_process_dump(ref, "reference", {{record("qkv.weight", "reduced_gradient", -1), qkv}});
  write_mesh(cand, kTp, kTpCoords, {record("qkv.weight", "reduced_gradient", -1, {Placement::shard(0, 0, 3)})},
             {{rows(qkv, {0, 1, 3, 4, 6, 7}), rows(qkv, {2, 5, 8}) * 1.1}});
  const DumpComparison c = compare_dumps(read_dump(cand), read_dump(ref), {});
  ASSERT_EQ(c.first_divergence, std::optional<size_t>(0));
  EXPECT_EQ(c.rows[0].where, "on tp rank 1 (dim 0 indices 2..2, 5..5, 8..8)");
  EXPECT_EQ(c.first_divergence_line().rfind(
                "first divergence: step 0, reduction, qkv.weight reduced_gradient on tp rank 1 (dim 0 indices 2..2, "
                "5..5, 8..8), ",
                0),
            0u)
      << c.first_divergence_line();
}

TEST(TensorParallelComparison, ReplicasThatArePartialSumsAreNamedAsLeftUnreducedOverTheirMeshDimension) {
  // A layer norm's gradient under sequence parallelism: each tp rank's term from its sequence
  // shard, a and g - a, summed over dp already, never summed over tp, declared replicated.
  const std::string ref = fresh_folder("tp-unreduced-reference.dump"), cand = fresh_folder("tp-unreduced-cand.dump");
  const at::Tensor g = ramp({8}, 0.3), a = ramp({8}, 1.7) * 0.6;
  write_single_process_dump(ref, "reference", {{record("ln.weight", "reduced_gradient", -1), g}});
  write_mesh(cand, kDpTp, kDpTpCoords,
             {record("ln.weight", "reduced_gradient", -1, {Placement::replicate(), Placement::replicate()})},
             {{a, g - a, a, g - a}});
  const DumpComparison c = compare_dumps(read_dump(cand), read_dump(ref), {});
  ASSERT_EQ(c.first_divergence, std::optional<size_t>(0));
  // The statistics' reading, the cause in place of "terms missing or extra", and tp 1 differing
  // from tp 0 by max |(g - a) - a| / max |a|.
  const std::string& text = c.rows[0].row.diagnosis.text;
  EXPECT_EQ(text.rfind("direction differs (cosine ", 0), 0u) << text;
  const std::string spread = format_sci((g - 2 * a).abs().max().item<double>() / a.abs().max().item<double>(), 1);
  const std::string tail =
      "): partial sums left unreduced over tp (summed over the tp ranks they match); replicas "
      "differ: tp 1 differs from tp 0 by max |diff| / max |tp 0| = " +
      spread;
  EXPECT_NE(text.find(tail), std::string::npos) << text;
  EXPECT_EQ(text.size() - text.find(tail), tail.size()) << text;
  const std::string line = c.first_divergence_line();
  EXPECT_EQ(line.rfind("first divergence: step 0, reduction, ln.weight reduced_gradient, direction differs", 0), 0u)
      << line;
  EXPECT_NE(line.find(tail + "; it is the first record"), std::string::npos) << line;
  // Replicas that differ and do not sum to the reference keep the plain reading.
  const std::string other = fresh_folder("tp-differ-cand.dump");
  write_mesh(other, kDpTp, kDpTpCoords,
             {record("ln.weight", "reduced_gradient", -1, {Placement::replicate(), Placement::replicate()})},
             {{g.roll(1, 0), g * 1.5, g.roll(1, 0), g * 1.5}});
  const DumpComparison d = compare_dumps(read_dump(other), read_dump(ref), {});
  ASSERT_FALSE(d.rows[0].row.passed);
  EXPECT_EQ(d.rows[0].row.diagnosis.text.find("unreduced"), std::string::npos) << d.rows[0].row.diagnosis.text;
  EXPECT_NE(d.rows[0].row.diagnosis.text.find("terms missing or extra"), std::string::npos)
      << d.rows[0].row.diagnosis.text;
  EXPECT_NE(d.rows[0].row.diagnosis.text.find("replicas differ: tp 1 differs from tp 0"), std::string::npos)
      << d.rows[0].row.diagnosis.text;
}

}  // namespace
}  // namespace magic
