// The references a launcher computes once for ranks that share its memory (forked ranks, rank
// threads): a check given them reports what it would have computed itself, judges against what
// it is given (so the ranks really use them), and computing them in the launcher starts no
// thread (a launcher with a thread would execute its ranks instead of forking them).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "checks/run_check.h"
#include "lib/distributed/runtime/launcher.h"
#include "lib/distributed/runtime/rank_program.h"
#include "tests/support.h"

namespace magic {
namespace {

checks::CheckRequest request_for(const std::string& topology, uint64_t seed = 0) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse(topology);
  request.settings.steps = 2;
  request.settings.seed = seed;
  return request;
}

TEST(SharedReferences, ACheckGivenTheReferencesReportsWhatItWouldHaveComputed) {
  for (const char* topology : {"dp=2", "n_ci=2,n_per_block=1"}) {
    checks::CheckRequest own = request_for(topology);
    checks::CheckRequest given = own;
    given.references = std::make_shared<const checks::ReferenceRuns>(checks::run_references(given.settings));
    const CheckReport a = testing::run_check_in_threads_as_given(own);  // each rank computes its own
    const CheckReport b = testing::run_check_in_threads(given);
    EXPECT_TRUE(a.rows_pass()) << topology;
    ASSERT_EQ(a.rows.size(), b.rows.size()) << topology;
    for (size_t i = 0; i < a.rows.size(); ++i) {
      EXPECT_EQ(a.rows[i].level + "/" + a.rows[i].tensor, b.rows[i].level + "/" + b.rows[i].tensor);
      // Bit-equal inputs give bit-equal statistics.
      EXPECT_EQ(a.rows[i].stats.worst_rel_err, b.rows[i].stats.worst_rel_err) << topology << " " << a.rows[i].tensor;
      EXPECT_EQ(a.rows[i].stats.reference_norm, b.rows[i].stats.reference_norm) << topology << " " << a.rows[i].tensor;
    }
  }
}

TEST(SharedReferences, ACheckJudgesAgainstTheReferencesItIsGiven) {
  // References of another seed (other data, initialization, teacher states): every rank must use
  // them instead of its own, so the check fails.
  checks::CheckRequest request = request_for("dp=2");
  request.references =
      std::make_shared<const checks::ReferenceRuns>(checks::run_references(request_for("dp=2", 7).settings));
  const CheckReport report = testing::run_check_in_threads(request);
  EXPECT_FALSE(report.rows_pass());
  EXPECT_EQ(report.exit_code(), 1);
}

// In a forked child (single-threaded whatever this test process runs), as a launcher on two
// cores starts: whether computing the references of both workloads left it single-threaded.
bool single_threaded_after(bool for_ranks) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(120);
    at::set_num_threads(2);
    for (const char* topology : {"dp=2", "n_ci=2,n_per_block=1"}) {
      const checks::CheckSettings s = request_for(topology).settings;
      if (for_ranks) checks::references_for_ranks(s);
      if (!for_ranks) checks::run_references(s);
    }
    std::_Exit(dist::single_threaded_process() ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
    ADD_FAILURE() << "the child did not exit normally (status " << status << ")";
    return false;
  }
  return WEXITSTATUS(status) == 0;
}

TEST(SharedReferences, ALauncherComputingThemForItsRanksStartsNoThread) {
  EXPECT_TRUE(single_threaded_after(/*for_ranks=*/true));
  // What it guards against: with two intra-op threads the computation starts a thread pool, and
  // the launcher would execute its ranks instead of forking them.
  EXPECT_FALSE(single_threaded_after(/*for_ranks=*/false));
}

TEST(SharedReferences, RanksShareTheLaunchersMemoryOnlyWhenTheyAreItsThreadsOrForkedFromIt) {
  dist::RankProgram program;
  program.launch = "threads";
  EXPECT_TRUE(dist::ranks_share_memory(program));
  program.launch = "env";
  EXPECT_FALSE(dist::ranks_share_memory(program));
  program.launch = "spawn";
  EXPECT_FALSE(dist::ranks_share_memory(program)) << "no entry: the ranks execute the binary";

  program.entry = [](int, char**) { return 0; };
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  std::thread other([&] {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return release; });
  });
  EXPECT_FALSE(dist::ranks_share_memory(program)) << "another thread: the ranks execute the binary";
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_one();
  other.join();

  const pid_t child = fork();  // single-threaded: spawned ranks with an entry are forked
  ASSERT_GE(child, 0);
  if (child == 0) std::_Exit(dist::ranks_share_memory(program) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace magic
