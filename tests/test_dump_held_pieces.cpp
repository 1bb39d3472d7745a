// Version 4 of the dump format (docs/dump-format.md, "Pieces some ranks hold"): a placement's `on`
// names the coordinates along its mesh dimension that hold a piece (a pipeline stage's layers, a
// tied embedding's copies on the first and last stage). A record is reassembled from its holders
// alone, a rank off them holds nothing, a diagnosis names the holders, and every field the version
// adds is checked. The manifests here are written by hand from the document, not by the writer
// under test; the expected wholes are built from the same pieces by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/io/atomic_file.h"
#include "lib/io/safetensors.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/dump_sink.h"
#include "lib/trace/reassemble.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// 6 ranks on the mesh dp=2 x pp=3 (rank = dp*3 + pp).
constexpr int kWorld = 6;
int64_t dp_of(int r) {
  return r / 3;
}
int64_t pp_of(int r) {
  return r % 3;
}
const std::vector<MeshDim> kMesh = {{"dp", 2}, {"pp", 3}};

// The three records' wholes: a stage 1 weight, a tied embedding's gradient (the sum of stage 0's
// and stage 2's terms over both dp ranks), and a last-stage activation split by rows over dp.
const at::Tensor kWeight = (at::arange(6, at::kDouble) * 0.91).cos().reshape({2, 3});
const at::Tensor kHidden = (at::arange(20, at::kDouble) * 0.37).sin().reshape({5, 4});
at::Tensor tied_term(int r) {
  return (at::arange(4, at::kDouble) * (0.7 + r)).sin().reshape({2, 2});
}
at::Tensor tied_whole() {
  return tied_term(0) + tied_term(2) + tied_term(3) + tied_term(5);
}
at::Tensor hidden_piece(int64_t dp) {
  return dp == 0 ? kHidden.narrow(0, 0, 3) : kHidden.narrow(0, 3, 2);
}

TraceRecord record(const std::string& name, const std::string& kind) {
  return {name, kind, "forward", "forward", 0, "", {}};
}

json held(json placement, std::vector<int64_t> on) {
  placement["on"] = on;
  return placement;
}

json manifest_record(const std::string& key, const std::string& name, const std::string& kind,
                     std::vector<int64_t> shape, std::vector<json> placements) {
  return {{"key", key},         {"name", name},   {"kind", kind},      {"phase", "forward"},
          {"order", "forward"}, {"step", 0},      {"micro_batch", -1}, {"layer", ""},
          {"dtype", "F64"},     {"shape", shape}, {"mesh", ""},        {"placements", placements}};
}

// Each rank's file holds the pieces its coordinates hold; `extra` gives rank 0 stage 1's weight too
// and `off` puts +1 into dp rank 1's hidden piece.
std::string write_held_dump(const std::string& name, const std::function<void(json&)>& edit = nullptr,
                            bool extra = false, bool off = false) {
  const fs::path folder = fs::path(::testing::TempDir()) / name;
  fs::remove_all(folder);
  for (int r = 0; r < kWorld; ++r) {
    TensorTree pieces;
    if (pp_of(r) == 1 || (extra && r == 0)) pieces.insert("r000000", kWeight);
    if (pp_of(r) != 1) pieces.insert("r000001", tied_term(r));
    if (pp_of(r) == 2) {
      at::Tensor h = hidden_piece(dp_of(r)).clone();
      if (off && dp_of(r) == 1) h[0][0] += 1.0;
      pieces.insert("r000002", h);
    }
    fs::create_directories(folder);
    save_safetensors((folder / dump_rank_file_name(r)).string(), pieces);
  }
  json m = {{"format", "magic-dump"},
            {"version", 4},
            {"run", name},
            {"mesh", {{{"name", "dp"}, {"size", 2}}, {{"name", "pp"}, {"size", 3}}}},
            {"meshes", json::object()},
            {"ranks", json::array()},
            {"records",
             {manifest_record("r000000", "blocks.1.w", "parameter", {2, 3},
                              {{{"type", "replicate"}}, held({{"type", "replicate"}}, {1})}),
              manifest_record(
                  "r000001", "tok_emb", "gradient", {2, 2},
                  {{{"type", "partial"}, {"reduce", "sum"}}, held({{"type", "partial"}, {"reduce", "sum"}}, {0, 2})}),
              manifest_record("r000002", "hidden", "activation", {5, 4},
                              {{{"type", "shard"}, {"dim", 0}}, held({{"type", "replicate"}}, {2})})}}};
  for (int r = 0; r < kWorld; ++r) {
    m["ranks"].push_back({{"rank", r},
                          {"coords", {dp_of(r), pp_of(r)}},
                          {"mesh_coords", json::object()},
                          {"file", dump_rank_file_name(r)}});
  }
  if (edit) edit(m);
  write_file_atomically((folder / "manifest.json").string(), m.dump(1));
  return folder.string();
}

std::string refusal(const std::function<void(json&)>& edit, bool extra = false) {
  const std::string folder = write_held_dump("refused", edit, extra);
  try {
    read_dump(folder);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(read without an error)";
}

TEST(DumpHeldPieces, ARecordIsJoinedFromTheRanksThatHoldItAlone) {
  const LoadedDump dump = read_dump(write_held_dump("held"));
  ASSERT_EQ(dump.tensors.size(), 3u);
  EXPECT_TRUE(at::equal(dump.tensors[0].whole, kWeight));
  EXPECT_TRUE(at::allclose(dump.tensors[1].whole, tied_whole(), 1e-14, 1e-15));  // summed in another order
  EXPECT_TRUE(at::equal(dump.tensors[2].whole, kHidden));
  // A rank off a record's holders has no piece of it.
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(dump.tensors[0].pieces[r].defined(), pp_of(r) == 1) << "rank " << r;
}

TEST(DumpHeldPieces, ThePiecesOffAreNamedAmongTheHolders) {
  const std::string reference = (fs::path(::testing::TempDir()) / "whole").string();
  fs::remove_all(reference);
  write_single_process_dump(reference, "whole",
                            {{record("blocks.1.w", "parameter"), kWeight},
                             {record("tok_emb", "gradient"), tied_whole()},
                             {record("hidden", "activation"), kHidden}});
  const DumpComparison c =
      compare_dumps(read_dump(write_held_dump("off", nullptr, false, true)), read_dump(reference), {});
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_TRUE(c.rows[0].row.passed);
  EXPECT_TRUE(c.rows[1].row.passed);
  EXPECT_FALSE(c.rows[2].row.passed);
  EXPECT_EQ(c.rows[2].where, "on dp rank 1 (dim 0 indices 3..4)");
}

TEST(DumpHeldPieces, CopiesThatDifferAreNamedByTheirCoordinatesAndSummedOverTheHolders) {
  // The tied embedding's copies after a sum over its holders that never ran: each stage keeps its
  // own term, declared replicated on stages 0 and 2.
  const std::vector<std::vector<int64_t>> coords = {{0}, {1}, {2}};
  const std::vector<MeshDim> pp = {{"pp", 3}};
  const std::vector<Placement> copies = {Placement::replicate().held_on({0, 2})};
  const Reassembled r = reassemble(pp, coords, {tied_term(0), at::Tensor(), tied_term(2)}, copies);
  EXPECT_NE(r.replicas_differ.find("pp 2 differs from pp 0"), std::string::npos) << r.replicas_differ;
  DumpTensor t;
  t.record.record = record("tok_emb", "reduced_gradient");
  t.record.record.placements = copies;
  t.pieces = {tied_term(0), at::Tensor(), tied_term(2)};
  t.whole = r.whole;
  EXPECT_EQ(off_pieces(t, pp, coords, tied_term(0) + tied_term(2), 1e-12), "");  // no shard names a piece
  // A zero copy has no scale to read the difference against: the message says it is zero.
  const Reassembled zero = reassemble(pp, coords, {at::zeros({2, 2}, at::kDouble), at::Tensor(), tied_term(2)}, copies);
  EXPECT_NE(zero.replicas_differ.find("replicas differ: pp 0 is zero, pp 2 is not (max |pp 2| = "), std::string::npos)
      << zero.replicas_differ;
  // A piece where none is held, and a holder without one, are refused by coordinate.
  EXPECT_NE(testing::input_error_of([&] {
              reassemble(pp, coords, {tied_term(0), tied_term(1), tied_term(2)}, copies);
            }).find("a piece at pp 1, which the placements give none"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              reassemble(pp, coords, {tied_term(0), at::Tensor(), at::Tensor()}, copies);
            }).find("no piece at pp 2"),
            std::string::npos);
}

TEST(DumpHeldPieces, CompareNamesACopyLeftUnsummedOverItsHolders) {
  const fs::path folder = fs::path(::testing::TempDir()) / "unsummed";
  const fs::path reference = fs::path(::testing::TempDir()) / "summed";
  fs::remove_all(folder);
  fs::remove_all(reference);
  const TraceRecord copies{
      "tok_emb", "reduced_gradient", "reduction", "first", 0, "", {Placement::replicate().held_on({0, 2})}};
  for (int r = 0; r < 3; ++r) {
    write_dump_rank_file(
        folder.string(), r,
        r == 1 ? std::vector<DumpSink::Entry>{} : std::vector<DumpSink::Entry>{{copies, tied_term(r)}});
  }
  write_dump_manifest(folder.string(), "unsummed", {{"pp", 3}}, {{0}, {1}, {2}}, {copies});
  TraceRecord whole = copies;
  whole.placements = {};
  write_single_process_dump(reference.string(), "summed", {{whole, tied_term(0) + tied_term(2)}});
  const LoadedDump candidate = read_dump(folder.string());
  EXPECT_EQ(candidate.manifest.version, 4);
  const DumpComparison c = compare_dumps(candidate, read_dump(reference.string()), {});
  ASSERT_TRUE(c.first_divergence);
  const std::string text = c.rows[*c.first_divergence].row.diagnosis.text;
  EXPECT_NE(text.find("partial sums left unreduced over pp (summed over the pp ranks they match)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("replicas differ: pp 2 differs from pp 0"), std::string::npos) << text;
}

TEST(DumpHeldPieces, EachFieldOfVersion4IsCheckedAndRefusedByName) {
  struct Case {
    std::string what, message;
    std::function<void(json&)> edit;
    bool extra = false;
  };
  const std::vector<Case> cases = {
      {"on in version 3", "records[0].placements[1].on: the coordinates holding a piece are version 4",
       [](json& m) { m["version"] = 3; }},
      {"a coordinate beyond the dimension", "records[0].placements[1].on: coordinate 3 along pp, whose size is 3",
       [](json& m) {
         m["records"][0]["placements"][1]["on"] = {1, 3};
       }},
      {"coordinates out of order", "records[1].placements[1].on: expected ascending distinct coordinates",
       [](json& m) {
         m["records"][1]["placements"][1]["on"] = {2, 0};
       }},
      {"no coordinate", "records[1].placements[1].on: expected the coordinates that hold a piece, got []",
       [](json& m) { m["records"][1]["placements"][1]["on"] = json::array(); }},
      {"a coordinate that is no integer", "records[2].placements[1].on: expected ascending distinct coordinates",
       [](json& m) { m["records"][2]["placements"][1]["on"] = {"2"}; }},
      {"a holder without its piece",
       "rank0.safetensors: record 'r000000' (step 0, forward, blocks.1.w parameter) is missing",
       [](json& m) {
         m["records"][0]["placements"][1]["on"] = {0, 1};
       }},
      {"a piece on a rank that holds none",
       "rank0.safetensors: record 'r000000' (step 0, forward, blocks.1.w parameter) is there, but its placements give "
       "rank 0 no piece",
       nullptr, true},
  };
  for (const Case& c : cases) {
    const std::string error = refusal(c.edit, c.extra);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.what << ": " << error;
    EXPECT_NE(error.find("refused"), std::string::npos) << c.what << ": " << error;
  }
}

TEST(DumpHeldPieces, TheManifestWriterWritesVersion4OnlyForHeldPieces) {
  const fs::path folder = fs::path(::testing::TempDir()) / "written";
  fs::remove_all(folder);
  const TraceRecord everywhere{
      "loss", "loss", "forward", "forward", 0, "", {Placement::partial(Placement::Reduce::kSum)}};
  const TraceRecord last{"logits", "logits", "forward", "forward", 0, "", {Placement::replicate().held_on({1})}};
  write_dump_rank_file(folder.string(), 0, {{everywhere, at::ones({}, at::kDouble)}});
  write_dump_rank_file(folder.string(), 1, {{everywhere, at::ones({}, at::kDouble)}, {last, kWeight}});
  write_dump_manifest(folder.string(), "written", {{"pp", 2}}, {{0}, {1}}, {everywhere, last});
  const LoadedDump dump = read_dump(folder.string());
  EXPECT_EQ(dump.manifest.version, 4);
  ASSERT_EQ(dump.tensors.size(), 2u);
  EXPECT_EQ(dump.tensors[0].whole.item<double>(), 2.0);
  EXPECT_TRUE(at::equal(dump.tensors[1].whole, kWeight));
  EXPECT_EQ(dump.tensors[1].record.record.placements[0].on, std::vector<int64_t>{1});
  // Without a held piece the same writer stays at version 2.
  fs::remove_all(folder);
  write_dump_rank_file(folder.string(), 0, {{everywhere, at::ones({}, at::kDouble)}});
  write_dump_rank_file(folder.string(), 1, {{everywhere, at::ones({}, at::kDouble)}});
  write_dump_manifest(folder.string(), "written", {{"pp", 2}}, {{0}, {1}}, {everywhere});
  EXPECT_EQ(read_dump(folder.string()).manifest.version, 2);
}

}  // namespace
}  // namespace magic
