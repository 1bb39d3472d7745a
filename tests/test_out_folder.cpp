// magic-run's --out is replaced as a whole (atomic_folder.h): a rerun whose writes fail part way (a
// full disk, here RLIMIT_FSIZE 0 with SIGXFSZ ignored, so each write fails as on a full disk)
// exits 2 in one line naming the file, and leaves the last run's files as they were, byte for
// byte, with nothing beside them; a folder holding a file no run writes is refused before the
// run, and the file is kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lib/core/strings.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = testing::read_file(e.path());
  return out;
}

TEST(OutFolder, ARerunThatCannotWriteLeavesTheLastRunsFilesWhole) {
  const std::string out = testing::fresh_dir("replaced-out");
  const std::string config = testing::write_tiny_run_config("replaced-out", {});
  ASSERT_EQ(testing::magic_run(str_cat("--config ", config, " --html --out ", out)).exit_code, 0);
  const auto before = files_of(out);
  ASSERT_EQ(before.size(), 4u);
  const testing::CommandOutcome full = testing::run_command(str_cat(
      "trap '' XFSZ; ulimit -f 0; ", MAGIC_RUN_BINARY, " --config ", config, " --training.steps 3 --html --out ", out));
  EXPECT_EQ(full.exit_code, 2) << full.output;
  const std::string last = full.output.substr(full.output.rfind('\n', full.output.size() - 2) + 1);
  EXPECT_EQ(last.rfind("magic-run: error: " + out + "/", 0), 0u) << last;
  EXPECT_NE(last.find(out + " holds the last run's files as they were"), std::string::npos) << last;
  EXPECT_EQ(files_of(out), before);
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path())) {
    EXPECT_EQ(e.path().filename().string().find(".replaced-out.partial"), std::string::npos) << e.path();
  }
  // Once it can write, the rerun replaces them all.
  ASSERT_EQ(testing::magic_run(str_cat("--config ", config, " --training.steps 3 --out ", out)).exit_code, 0);
  const auto after = files_of(out);
  EXPECT_EQ(after.size(), 3u);  // no report.html: this run wrote none
  EXPECT_NE(after.at("scores.safetensors"), before.at("scores.safetensors"));
  fs::remove_all(out);
}

TEST(OutFolder, AFolderHoldingAFileNoRunWritesIsRefusedBeforeTheRun) {
  const std::string out = testing::fresh_dir("foreign-out");
  fs::create_directories(out);
  std::ofstream(out + "/notes.txt") << "mine";
  const testing::CommandOutcome o =
      testing::magic_run(str_cat("--config ", testing::write_tiny_run_config("foreign-out", {}), " --out ", out));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.output, "magic-run: error: --out " + out +
                          ": holds 'notes.txt', which a run does not write; name a new folder, an empty one or one a "
                          "run wrote (the folder is replaced as a whole)\n");
  EXPECT_EQ(testing::read_file(out + "/notes.txt"), "mine");
  fs::remove_all(out);
}

}  // namespace
}  // namespace magic
