// Atomic file writes: the file appears whole or not at all, an earlier version survives a failed
// write, and no temporary file is left behind either way; a folder's sibling left by a killed
// process is removed by the next write.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <sys/wait.h>
#include <unistd.h>

#include "lib/core/error.h"
#include "lib/io/atomic_file.h"
#include "lib/io/atomic_folder.h"
#include "tests/support.h"

namespace magic {
namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/atomic-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

int entries_in(const std::string& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFile, WritesTheWholeFileAndLeavesNothingElse) {
  const std::string dir = fresh_dir("ok");
  write_file_atomically(dir + "/out.txt", "hello\n");
  EXPECT_EQ(testing::read_file(dir + "/out.txt"), "hello\n");
  EXPECT_EQ(entries_in(dir), 1);
}

TEST(AtomicFile, AFailedStreamKeepsTheEarlierFileAndNamesThePath) {
  const std::string dir = fresh_dir("badbit");
  write_file_atomically(dir + "/out.txt", "old\n");
  const std::string error = testing::input_error_of([&] {
    write_file_atomically(dir + "/out.txt", [](std::ostream& out) {
      out << "half";
      out.setstate(std::ios::badbit);  // what a full disk does to the stream
    });
  });
  EXPECT_NE(error.find(dir + "/out.txt: write failed"), std::string::npos) << error;
  EXPECT_EQ(testing::read_file(dir + "/out.txt"), "old\n");
  EXPECT_EQ(entries_in(dir), 1);
}

TEST(AtomicFile, AWriterThatThrowsLeavesNoTemporaryFile) {
  const std::string dir = fresh_dir("throws");
  EXPECT_THROW(write_file_atomically(dir + "/out.txt",
                                     [](std::ostream& out) {
                                       out << "part";
                                       throw std::runtime_error("writer failed");
                                     }),
               std::runtime_error);
  EXPECT_EQ(entries_in(dir), 0);
}

TEST(AtomicFile, AMissingDirectoryIsABadInputNamingIt) {
  const std::string error =
      testing::input_error_of([] { write_file_atomically("/nonexistent-dir-for-test/out.txt", "x"); });
  EXPECT_NE(error.find("/nonexistent-dir-for-test/out.txt: cannot open"), std::string::npos) << error;
}

// A device that accepts the open but fails every write: the close must report it.
TEST(AtomicFile, ACloseThatFailsIsReported) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  // The temporary file is path + ".partial.<pid>": a symlink there to /dev/full makes the data
  // write fail at flush or close time, as a full disk would.
  const std::string dir = fresh_dir("full");
  const std::string path = dir + "/out.txt";
  std::filesystem::create_symlink("/dev/full", path + ".partial." + std::to_string(getpid()));
  const std::string error = testing::input_error_of([&] { write_file_atomically(path, std::string(1 << 16, 'x')); });
  EXPECT_NE(error.find("write failed"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A process killed while it filled --out's hidden sibling leaves it; the next replacement at the
// same place removes it once that pid is gone, and leaves a live process's sibling alone.
TEST(AtomicFolder, ASiblingLeftByAKilledProcessIsRemovedByTheNextWrite) {
  const std::string dir = fresh_dir("abandoned");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: no process has this pid now
  const std::string dead = dir + "/.out.partial-" + std::to_string(child) + "-abcdef";
  const std::string live = dir + "/.out.partial-" + std::to_string(getpid()) + "-ghijkl";
  for (const auto& d : {dead, live}) {
    std::filesystem::create_directories(d);
    std::ofstream(d + "/scores.tsv.partial.1") << "half";
  }
  replace_folder_atomically(dir + "/out", "--out", {"a.txt"},
                            [](const std::string& temp) { write_file_atomically(temp + "/a.txt", "new"); });
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_EQ(testing::read_file(dir + "/out/a.txt"), "new");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace magic
