// dist::write_mesh_dump across real Gloo ranks (threads of this process): the ranks' files and
// rank 0's manifest read back as the whole tensors, placed by the coordinates each rank states
// (not by its rank number); a rank that cannot write its file, ranks whose records differ, or a
// destination that filled meanwhile leave no dump behind (nor the hidden folder it was written in),
// and every rank hears why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

// Nothing beside `folder` in its parent: no hidden folder a rank was filling is left behind.
void expect_nothing_left_beside(const std::string& folder) {
  for (const auto& e : fs::directory_iterator(fs::path(folder).parent_path()))
    EXPECT_NE(e.path().filename().string().rfind("." + fs::path(folder).filename().string(), 0), 0u) << e.path();
}

TEST(MeshDump, ARankThatCannotWriteLeavesNoDumpAndEveryRankHearsWhich) {
  const std::string folder = fresh_folder("unwritable");
  std::vector<std::string> answers(2);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    std::vector<DumpSink::Entry> entries = rank_entries(rt.rank());
    // A dtype the file format cannot store: rank 1's write fails.
    if (rt.rank() == 1) entries[0].tensor = entries[0].tensor.to(at::kComplexDouble);
    answers[rt.rank()] = dist::write_mesh_dump(folder, "test", entries, *rt.world(), backwards_layout(rt.rank()));
  });
  EXPECT_NE(answers[0].find("rank 1 could not write its records"), std::string::npos) << answers[0];
  EXPECT_NE(answers[1].find("rank 1 could not write its records to " + folder), std::string::npos) << answers[1];
  EXPECT_EQ(answers[1].find(".partial-"), std::string::npos) << answers[1];  // named by the destination
  EXPECT_FALSE(fs::exists(folder));
  expect_nothing_left_beside(folder);
}

TEST(MeshDump, AFolderThatFilledMeanwhileIsLeftAsItWasWithNoDumpInIt) {
  const std::string folder = fresh_folder("filled");
  std::vector<std::string> answers(2);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    // Another program writes into the destination after the run checked it was empty.
    if (rt.rank() == 0) {
      fs::create_directories(folder);
      std::ofstream(fs::path(folder) / "theirs.txt") << "not ours";
    }
    answers[rt.rank()] =
        dist::write_mesh_dump(folder, "test", rank_entries(rt.rank()), *rt.world(), backwards_layout(rt.rank()));
  });
  EXPECT_NE(answers[0].find("cannot move the finished folder into place"), std::string::npos) << answers[0];
  EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(folder), fs::directory_iterator()),
            std::vector<fs::path>{fs::path(folder) / "theirs.txt"});
  expect_nothing_left_beside(folder);
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
  expect_nothing_left_beside(folder);
}

}  // namespace
}  // namespace magic
