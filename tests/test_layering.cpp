// The library's folders are layers (docs/design.md, "Layers"): each includes only the layers
// below it, so they read one after another, bottom up. lib/step holds the interfaces the
// distributed code implements and lib/train drives (StepFunction, Parallelism, the precision
// policy's steps); an include that runs back up (lib/distributed -> lib/train) is a cycle.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

// Each layer and the layers it may include (besides itself).
const std::map<std::string, std::set<std::string>>& allowed_includes() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"core", {}},
      {"compare", {"core"}},
      {"io", {"core", "compare"}},
      {"trace", {"core", "compare", "io"}},
      {"model", {"core", "io", "trace"}},
      {"optim", {"core"}},
      {"text", {"core"}},
      {"data", {"core", "io", "model", "text"}},
      {"step", {"core", "model", "optim", "trace"}},
      {"distributed", {"core", "compare", "io", "data", "model", "optim", "step", "trace", "text"}},
      {"train", {"core", "compare", "io", "model", "optim", "text", "data", "step", "distributed", "trace"}},
      {"live", {"core", "io", "trace"}},
  };
  return table;
}

// "file: includes lib/X/..." for every include under `lib_root` that the table does not allow,
// and for every folder the table does not know.
std::vector<std::string> upward_includes(const fs::path& lib_root) {
  const std::regex include_line(R"(#\s*include\s*"lib/([a-z_]+)/)");
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(lib_root)) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp")) continue;
    const fs::path relative = fs::relative(entry.path(), lib_root);
    if (relative.begin() == relative.end() || std::next(relative.begin()) == relative.end()) continue;  // lib/pch.h
    const std::string layer = relative.begin()->string();
    const auto rule = allowed_includes().find(layer);
    if (rule == allowed_includes().end()) {
      found.push_back("lib/" + relative.string() + ": folder '" + layer + "' has no place in the layer table");
      continue;
    }
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string target = m[1];
      if (target != layer && rule->second.count(target) == 0) {
        found.push_back("lib/" + relative.string() + ": " + line);
      }
    }
  }
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(Layering, NoLibraryFolderIncludesALayerAboveIt) {
  const auto found = upward_includes(testing::source_path("lib"));
  EXPECT_TRUE(found.empty()) << joined(found);
}

TEST(Layering, APlantedIncludeThatRunsBackUpIsNamed) {
  const fs::path root = fs::path(::testing::TempDir()) / "planted-lib";
  fs::create_directories(root / "distributed" / "parallel");
  fs::create_directories(root / "step");
  std::ofstream(root / "step" / "ok.h") << "#include \"lib/core/tensor_tree.h\"\n";
  std::ofstream(root / "distributed" / "parallel" / "bad.h")
      << "#include \"lib/step/parallelism.h\"\n#include \"lib/train/magic_pipeline.h\"\n";
  const auto found = upward_includes(root);
  ASSERT_EQ(found.size(), 1u) << joined(found);
  EXPECT_EQ(found[0], "lib/distributed/parallel/bad.h: #include \"lib/train/magic_pipeline.h\"");

  // A folder outside the table is named too: a new layer has to say where it stands.
  fs::create_directories(root / "newlayer");
  std::ofstream(root / "newlayer" / "x.cpp") << "\n";
  EXPECT_EQ(upward_includes(root).size(), 2u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace magic
