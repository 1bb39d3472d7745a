// docs/design.md, "Layers": the reference uses lib/core, model, optim and data only, and of lib/trace
// the two headers its trace points need (a record copies a tensor and changes no value; the first
// divergence compares them). If it shared the engine's stepping loop (lib/train) or anything
// distributed (lib/distributed), a bug there would cancel out of every comparison.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support.h"

namespace magic {
namespace {

TEST(ReferenceIndependence, IncludesNothingFromTrainOrDist) {
  const std::regex include_line(R"re(#\s*include\s*"(lib/[a-z_]+)/([a-z_.]+)")re");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_path("reference"))) {
    const auto ext = entry.path().extension();
    if (ext != ".h" && ext != ".cpp") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string folder = m[1], file = m[2];
      const bool recording = folder == "lib/trace" && (file == "trace_sink.h" || file == "trace_context.h");
      EXPECT_TRUE(folder == "lib/core" || folder == "lib/model" || folder == "lib/optim" || folder == "lib/data" ||
                  recording)
          << entry.path() << " includes " << line;
    }
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace magic
