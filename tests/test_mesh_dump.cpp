// dist::write_mesh_dump across real Gloo ranks (threads of this process): the ranks' files and
// rank 0's manifest read back as the whole tensors, placed by the coordinates each rank states
// (not by its rank number); a rank that cannot write its file, or ranks whose records differ,
// leave no dump behind and every rank hears why.
#include <gtest/gtest.h>

#include <filesystem>

#include "lib/distributed/parallel/mesh_dump.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/trace/dump_reader.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string fresh_folder(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / "mesh-dump" / name;
  fs::remove_all(p);
  return p.string();
}

// Two ranks on a mesh [dp=2] whose coordinates run backwards: rank r holds dp index 1 - r.
TraceLayout backwards_layout(int rank) {
  TraceLayout layout;
  layout.mesh = {{"dp", 2}};
  layout.coords = {1 - rank};
  return layout;
}

TraceRecord rows_record(const std::string& name) {
  return {name, "activation", "forward", "forward", 0, "", {Placement::shard(0)}};
}

// Rows 0-1 of the whole belong to dp index 0, rows 2-3 to dp index 1.
const at::Tensor& whole() {
  static const at::Tensor w = at::arange(8, at::kDouble).reshape({4, 2});
  return w;
}

std::vector<DumpSink::Entry> rank_entries(int rank) {
  const int64_t index = backwards_layout(rank).coords[0];
  return {{rows_record("hidden"), whole().slice(0, 2 * index, 2 * index + 2).clone()}};
}

TEST(MeshDump, ReadsBackTheWholePlacedByEachRanksCoordinates) {
  const std::string folder = fresh_folder("backwards");
  std::vector<std::string> answers(2);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    answers[rt.rank()] =
        dist::write_mesh_dump(folder, "test", rank_entries(rt.rank()), *rt.world(), backwards_layout(rt.rank()));
  });
  EXPECT_EQ(answers[0], "");
  EXPECT_EQ(answers[1], "");
  const LoadedDump d = read_dump(folder);
  ASSERT_EQ(d.tensors.size(), 1u);
  EXPECT_TRUE(at::equal(d.tensors[0].whole, whole()));
  EXPECT_EQ(d.coords(), (std::vector<std::vector<int64_t>>{{1}, {0}}));
  fs::remove_all(folder);
}

TEST(MeshDump, ARankThatCannotWriteLeavesNoDumpAndEveryRankHearsWhich) {
  const std::string folder = fresh_folder("unwritable");
  // A folder where rank 1's file goes: its write fails even for root.
  fs::create_directories(fs::path(folder) / "rank1.safetensors");
  std::vector<std::string> answers(2);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    answers[rt.rank()] =
        dist::write_mesh_dump(folder, "test", rank_entries(rt.rank()), *rt.world(), backwards_layout(rt.rank()));
  });
  EXPECT_NE(answers[0].find("rank 1 could not write its records"), std::string::npos) << answers[0];
  EXPECT_NE(answers[1].find("rank 1 could not write its records to " + folder), std::string::npos) << answers[1];
  EXPECT_FALSE(fs::exists(fs::path(folder) / "rank0.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(folder) / "manifest.json"));
  fs::remove_all(folder);
}

TEST(MeshDump, RanksThatRecordedDifferentTensorsLeaveNoDump) {
  const std::string folder = fresh_folder("different");
  std::vector<std::string> answers(2);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    std::vector<DumpSink::Entry> entries = rank_entries(rt.rank());
    if (rt.rank() == 0) entries.push_back({rows_record("extra"), whole().slice(0, 0, 2).clone()});
    answers[rt.rank()] = dist::write_mesh_dump(folder, "test", entries, *rt.world(), backwards_layout(rt.rank()));
  });
  EXPECT_NE(answers[0].find("the ranks made different records"), std::string::npos) << answers[0];
  EXPECT_EQ(answers[1], "");  // only rank 0 writes (and so learns about) the manifest
  EXPECT_FALSE(fs::exists(folder));
}

}  // namespace
}  // namespace magic
