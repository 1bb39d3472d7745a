// Version 3 of the dump format (docs/dump-format.md, "Named meshes: two layouts over one world"):
// a record placed on a named grid is reassembled from each rank's coordinates on that grid, a
// diagnosis names ranks on it, and every field the version adds is checked. The manifests here are
// written by hand from the document, not by the writer under test; the expected wholes are built
// from the same pieces by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/io/atomic_file.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/dump_sink.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// 4 ranks: the main grid dp=2 x cp=2 (rank = dp*2 + cp), the grid "encoder" dp=4 (rank = dp).
const at::Tensor kPrefix = (at::arange(24, at::kDouble) * 0.37).sin().reshape({8, 3});
const at::Tensor kWeight = (at::arange(6, at::kDouble) * 0.91).cos().reshape({2, 3});

TraceRecord record(const std::string& name, const std::string& kind, const std::string& phase,
                   std::vector<Placement> placements) {
  return {name, kind, phase, "forward", 0, "", std::move(placements)};
}

json placement(const std::string& type, int64_t dim = -1) {
  json p = {{"type", type}};
  if (dim >= 0) p["dim"] = dim;
  if (type == "partial") p["reduce"] = "sum";
  return p;
}

json manifest_record(const std::string& key, const std::string& name, const std::string& kind, const std::string& phase,
                     std::vector<int64_t> shape, const std::string& mesh, std::vector<json> placements) {
  return {{"key", key},         {"name", name},   {"kind", kind},      {"phase", phase},
          {"order", "forward"}, {"step", 0},      {"micro_batch", -1}, {"layer", ""},
          {"dtype", "F64"},     {"shape", shape}, {"mesh", mesh},      {"placements", placements}};
}

json grid(std::vector<std::pair<std::string, int64_t>> dims) {
  json out = json::array();
  for (const auto& [name, size] : dims) out.push_back({{"name", name}, {"size", size}});
  return out;
}

// A dump of three records, rank `off_rank`'s prefix piece (if any) off by +1 at its first entry:
// the prefix [8, 3] on the encoder grid (rows 2r, 2r + 1 on rank r), the loss on the main grid (a
// partial sum over both dimensions: rank r holds r + 1), and a weight replicated on the encoder's.
std::string write_two_grid_dump(const std::string& name, int off_rank = -1,
                                const std::function<void(json&)>& edit = nullptr) {
  const fs::path folder = fs::path(::testing::TempDir()) / name;
  fs::remove_all(folder);
  for (int r = 0; r < 4; ++r) {
    at::Tensor prefix = kPrefix.narrow(0, 2 * r, 2).clone();
    if (r == off_rank) prefix[0][0] += 1.0;
    write_dump_rank_file(folder.string(), r,
                         {{record("prefix", "activation", "forward", {}), prefix},
                          {record("loss", "loss", "forward", {}), at::full({}, r + 1.0, at::kDouble)},
                          {record("encoder.fc.weight", "parameter", "other", {}), kWeight}});
  }
  json m = {
      {"format", "magic-dump"},
      {"version", 3},
      {"run", name},
      {"mesh", grid({{"dp", 2}, {"cp", 2}})},
      {"meshes", {{"encoder", grid({{"dp", 4}})}}},
      {"ranks", json::array()},
      {"records",
       {manifest_record("r000000", "prefix", "activation", "forward", {8, 3}, "encoder", {placement("shard", 0)}),
        manifest_record("r000001", "loss", "loss", "forward", {}, "", {placement("partial"), placement("partial")}),
        manifest_record("r000002", "encoder.fc.weight", "parameter", "other", {2, 3}, "encoder",
                        {placement("replicate")})}}};
  for (int r = 0; r < 4; ++r) {
    m["ranks"].push_back({{"rank", r},
                          {"coords", {r / 2, r % 2}},
                          {"mesh_coords", {{"encoder", {r}}}},
                          {"file", dump_rank_file_name(r)}});
  }
  if (edit) edit(m);
  write_file_atomically((folder / "manifest.json").string(), m.dump(1));
  return folder.string();
}

std::string refusal(const std::function<void(json&)>& edit) {
  const std::string folder = write_two_grid_dump("refused", -1, edit);
  try {
    read_dump(folder);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(read without an error)";
}

TEST(DumpNamedGrids, ARecordOnANamedGridIsJoinedByTheRanksCoordinatesOnIt) {
  const LoadedDump d = read_dump(write_two_grid_dump("two-grids"));
  ASSERT_EQ(d.tensors.size(), 3u);
  EXPECT_EQ(d.manifest.version, 3);
  EXPECT_EQ(grids_text(d.manifest), "dp=2,cp=2; encoder: dp=4");
  EXPECT_TRUE(at::equal(d.tensors[0].whole, kPrefix));
  EXPECT_EQ(d.tensors[1].whole.item<double>(), 1.0 + 2.0 + 3.0 + 4.0);
  EXPECT_TRUE(at::equal(d.tensors[2].whole, kWeight));
}

// What the writer writes of a manifest with named grids reads back the same; without named grids
// it stays version 2.
TEST(DumpNamedGrids, TheManifestWriterKeepsTheGridsAndWritesVersion3OnlyForThem) {
  const DumpManifest m = read_dump(write_two_grid_dump("round-trip")).manifest;
  const DumpManifest again = parse_dump_manifest(dump_manifest_json(m), "written");
  EXPECT_EQ(again.version, 3);
  EXPECT_EQ(grids_text(again), "dp=2,cp=2; encoder: dp=4");
  EXPECT_EQ(again.coords("encoder"), (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(again.coords(""), (std::vector<std::vector<int64_t>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  ASSERT_EQ(again.records.size(), 3u);
  EXPECT_EQ(again.records[0].record.mesh, "encoder");
  EXPECT_EQ(again.records[1].record.mesh, "");

  DumpManifest plain = m;
  plain.meshes.clear();
  for (auto& r : plain.ranks) r.mesh_coords.clear();
  for (auto& d : plain.records) d.record.mesh.clear();
  plain.records.erase(plain.records.begin());  // its placements are the encoder grid's
  plain.records.pop_back();
  const std::string text = dump_manifest_json(plain);
  EXPECT_EQ(nlohmann::json::parse(text)["version"], 2);
  EXPECT_EQ(text.find("mesh_coords"), std::string::npos);
  EXPECT_EQ(parse_dump_manifest(text, "written").records.size(), 1u);
}

TEST(DumpNamedGrids, TheDiagnosisNamesTheOffRankOnTheRecordsGrid) {
  const std::string reference = (fs::path(::testing::TempDir()) / "one").string();
  fs::remove_all(reference);
  write_single_process_dump(reference, "one",
                            {{record("prefix", "activation", "forward", {}), kPrefix},
                             {record("loss", "loss", "forward", {}), at::full({}, 10.0, at::kDouble)},
                             {record("encoder.fc.weight", "parameter", "other", {}), kWeight}});
  const DumpComparison c = compare_dumps(read_dump(write_two_grid_dump("off", 1)), read_dump(reference), {});
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_FALSE(c.rows[0].row.passed);
  EXPECT_EQ(c.rows[0].where, "on encoder dp rank 1 (dim 0 indices 2..3)");
  EXPECT_TRUE(c.rows[1].row.passed);
  EXPECT_TRUE(c.rows[2].row.passed);
  ASSERT_TRUE(c.first_divergence);
  EXPECT_EQ(*c.first_divergence, 0u);
}

TEST(DumpNamedGrids, EachFieldOfVersion3IsCheckedAndRefusedByName) {
  struct Case {
    std::string what, message;
    std::function<void(json&)> edit;
  };
  const std::vector<Case> cases = {
      {"a record on no grid", "records[0].mesh: no grid named 'vision'",
       [](json& m) { m["records"][0]["mesh"] = "vision"; }},
      {"placements for the main grid on the encoder's",
       "records[2].placements: expected one per dimension of its grid 'encoder' (1), got 2",
       [](json& m) { m["records"][2]["placements"].push_back(placement("replicate")); }},
      {"a record without its grid", "records[1].mesh", [](json& m) { m["records"][1].erase("mesh"); }},
      {"a rank without coordinates on the named grid", "ranks[2].mesh_coords",
       [](json& m) { m["ranks"][2]["mesh_coords"] = json::object(); }},
      {"two ranks on one place of the named grid", "ranks[3].mesh_coords.encoder: coordinates [0] belong to two ranks",
       [](json& m) { m["ranks"][3]["mesh_coords"]["encoder"] = {0}; }},
      {"a coordinate outside the named grid", "ranks[1].mesh_coords.encoder: coordinate 0 (dp) must be 0 to 3",
       [](json& m) { m["ranks"][1]["mesh_coords"]["encoder"] = {4}; }},
      {"a named grid of another world", "meshes.encoder: the grid dp=2 has 2 ranks, the mesh dp=2,cp=2 has 4",
       [](json& m) {
         m["meshes"]["encoder"] = grid({{"dp", 2}});
       }},
      {"named grids in version 2", "meshes", [](json& m) { m["version"] = 2; }},
      {"meshes that are not an object", "meshes: expected an object of named grids",
       [](json& m) { m["meshes"] = json::array(); }},
  };
  for (const Case& c : cases) {
    const std::string error = refusal(c.edit);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.what << ": " << error;
    EXPECT_NE(error.find("manifest.json"), std::string::npos) << c.what << ": " << error;
  }
}

}  // namespace
}  // namespace magic
