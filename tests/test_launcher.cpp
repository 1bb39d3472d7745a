// The launcher's exit paths, one by one. Most run spawn_ranks in this process with shell ranks
// (fast, and each path planted exactly); the rest run magic-check as users do: under a parent
// that ignores SIGCHLD, with a rank stopped by SIGSTOP, with too many ranks.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "lib/core/error.h"
#include "lib/distributed/runtime/launcher.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/rank_failure.h"
#include "lib/distributed/runtime/runtime.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/launcher-" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Where the launchers of this test program put their rank logs (failed runs keep theirs): one
// directory per test process, rather than a new /tmp/magic-ranks-* per run. Per process, because
// ctest runs tests in parallel processes: one shared directory, emptied by each process as it
// starts, was emptied under another's running launcher ("cannot create .../rank-1.log").
const std::string& logs_root() {
  static const std::string root = fresh_dir("kept-logs-" + std::to_string(getpid()));
  return root;
}

struct Spawned {
  int exit_code = -1;
  std::string log;
  double seconds = 0;
  dist::RankFailure blamed;  // the rank the launcher named (spawn_shell, spawn_forked: rank and kind)
};

// Every rank runs `script` under /bin/sh (RANK, WORLD_SIZE and MAGIC_PID_DIR set).
Spawned spawn_shell(const std::string& script, int64_t world_size, std::chrono::milliseconds timeout = 2s,
                    const std::string& log_root = "") {
  dist::SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"sh", "-c", script};
  options.world_size = world_size;
  options.timeout = timeout;
  options.name = "launcher-test";
  options.log_root = log_root.empty() ? logs_root() : log_root;
  std::ostringstream log;
  const auto start = Clock::now();
  Spawned out;
  options.failure = &out.blamed;
  out.exit_code = dist::spawn_ranks(options, log);
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.log = log.str();
  return out;
}

// The ranks' pids, once each has written its pid file.
std::vector<pid_t> wait_for_pids(const std::string& dir, int world_size, std::chrono::seconds limit = 60s) {
  const auto deadline = Clock::now() + limit;
  std::vector<pid_t> pids(world_size, 0);
  for (;;) {
    bool all = true;
    for (int r = 0; r < world_size; ++r) {
      if (pids[r] != 0) continue;
      const std::string text = testing::read_file(dir + "/rank-" + std::to_string(r) + ".pid");
      if (!text.empty() && text.back() == '\n') pids[r] = std::stoi(text);
      all = all && pids[r] != 0;
    }
    if (all) return pids;
    if (Clock::now() > deadline) throw std::runtime_error("ranks never wrote their pid files in " + dir);
    std::this_thread::sleep_for(20ms);
  }
}

void expect_gone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " is still alive";
}

void expect_no_stack_frames(const std::string& output) {
  EXPECT_EQ(output.find("frame #"), std::string::npos) << output;
  EXPECT_EQ(output.find("Exception raised from"), std::string::npos) << output;
}

const char* kWritePid = "echo $$ > $MAGIC_PID_DIR/rank-$RANK.pid; ";

TEST(Launcher, RankZerosCodeIsTheVerdictWhenEveryRankEndsNormally) {
  EXPECT_EQ(spawn_shell("exit 0", 3).exit_code, 0);
  EXPECT_EQ(spawn_shell("[ $RANK = 0 ] && exit 1; exit 0", 3).exit_code, 1);
  // Only rank 0 may say "a check failed"; 1 from another rank is a failure of that rank.
  auto o = spawn_shell("[ $RANK = 2 ] && exit 1; exit 0", 3);
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_NE(o.log.find("rank 2 of 3"), std::string::npos) << o.log;
}

// A long run is seen to move: where the ranks are, every progress_every, on the progress stream
// (not on the launcher's log, which becomes a failed run's report).
TEST(Launcher, ALongRunReportsWhereItsRanksAreOnTheProgressStream) {
  dist::SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"sh", "-c", "sleep 3.5"};
  options.world_size = 2;
  options.name = "launcher-test";
  options.log_root = logs_root();
  options.progress_every = 1s;
  std::ostringstream log, progress;
  options.progress = &progress;
  EXPECT_EQ(dist::spawn_ranks(options, log), 0) << log.str();
  const std::string lines = progress.str();
  EXPECT_NE(lines.find("launcher-test: after 1 s: ranks 0, 1 in phase 'startup'\n"), std::string::npos) << lines;
  EXPECT_NE(lines.find("launcher-test: after 3 s: "), std::string::npos) << lines;
  EXPECT_EQ(log.str().find("after 1 s"), std::string::npos) << log.str();
  options.progress_every = 0s;  // off
  std::ostringstream quiet;
  options.progress = &quiet;
  EXPECT_EQ(dist::spawn_ranks(options, log), 0);
  EXPECT_EQ(quiet.str(), "");
}

TEST(Launcher, AnIgnoredSigchldDoesNotHideTheStatusesAndIsRestored) {
  struct sigaction ignore {
  }, found{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, nullptr);
  const int failing = spawn_shell("[ $RANK = 0 ] && exit 1; exit 0", 2).exit_code;
  const int passing = spawn_shell("exit 0", 2).exit_code;
  sigaction(SIGCHLD, nullptr, &found);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &fallback, nullptr);
  EXPECT_EQ(failing, 1);
  EXPECT_EQ(passing, 0);
  EXPECT_EQ(found.sa_handler, SIG_IGN) << "the launcher restores the disposition it found";
}

TEST(Launcher, IgnoredSignalsAreNotInheritedByTheRanks) {
  // SIG_IGN survives exec; a rank must start with default dispositions, as from a shell.
  struct sigaction ignore {
  }, fallback{};
  ignore.sa_handler = SIG_IGN;
  fallback.sa_handler = SIG_DFL;
  sigaction(SIGUSR1, &ignore, nullptr);
  auto o = spawn_shell("[ $RANK = 1 ] && kill -USR1 $$; exit 0", 2);
  sigaction(SIGUSR1, &fallback, nullptr);
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_NE(o.log.find("rank 1 of 2"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("killed by signal 10 (SIGUSR1)"), std::string::npos) << o.log;
}

TEST(Launcher, ARankThatFailsIsNamedWithItsOwnMessageAndItsLogIsKept) {
  const std::string root = fresh_dir("failed-logs");
  auto o = spawn_shell(
      "if [ $RANK = 1 ]; then echo noise >&2; echo 'launcher-test: rank 1: error: planted failure' >&2; "
      "exit 3; fi; exec sleep 30",
      3, 2s, root);
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_LT(o.seconds, 10) << "the others are stopped, not waited for";
  EXPECT_NE(o.log.find("rank 1 of 3"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("exited with code 3"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find(": error: planted failure; its log: " + root), std::string::npos) << o.log;
  std::smatch path;
  ASSERT_TRUE(std::regex_search(o.log, path, std::regex("its log: (\\S+)"))) << o.log;
  EXPECT_NE(testing::read_file(path[1]).find("noise"), std::string::npos) << "the log holds the full output";
}

TEST(Launcher, ARankKilledByASignalIsNamedAndNothingIsLeftBehind) {
  const std::string pids_dir = fresh_dir("killed");
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  auto o = spawn_shell(std::string(kWritePid) + "[ $RANK = 2 ] && sleep 0.3 && kill -9 $$; exec sleep 30", 4);
  unsetenv("MAGIC_PID_DIR");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_LT(o.seconds, 10);
  EXPECT_NE(o.log.find("rank 2 of 4"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << o.log;
  expect_gone(wait_for_pids(pids_dir, 4, 1s));
}

TEST(Launcher, ARankStoppedPastTheTimeoutIsNamedAndNothingIsLeftBehind) {
  const std::string pids_dir = fresh_dir("stopped");
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  auto o = spawn_shell(std::string(kWritePid) + "[ $RANK = 1 ] && kill -STOP $$; exec sleep 30", 3, 1s);
  unsetenv("MAGIC_PID_DIR");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_LT(o.seconds, 8);
  EXPECT_NE(o.log.find("rank 1 of 3"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("was stopped by signal 19 (SIGSTOP) and did not resume within 1 s in phase 'startup'"),
            std::string::npos)
      << o.log;
  EXPECT_NE(o.log.find("ranks 0, 2: in phase 'startup'"), std::string::npos) << o.log;
  expect_gone(wait_for_pids(pids_dir, 3, 1s));
}

TEST(Launcher, ARankStoppedAfterTheOthersFinishedIsStillCaught) {
  // As when rank 0 is stopped while it compares: no collective is left to time out.
  auto o = spawn_shell("[ $RANK = 0 ] && kill -STOP $$; exit 0", 3, 1s);
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_LT(o.seconds, 8);
  EXPECT_NE(o.log.find("rank 0 of 3"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("was stopped by signal 19 (SIGSTOP)"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("ranks 1, 2: finished (exit code 0)"), std::string::npos) << o.log;
}

// TCPStore's server reads a request to its end on its one thread: a rank stopped halfway through
// sending one (here: the request type byte, then nothing) blocks every other store client,
// the launcher reading progress included. Before the fix the launcher waited for ever.
TEST(Launcher, ARankStoppedInTheMiddleOfAStoreRequestDoesNotHangTheLauncher) {
  const std::string pids_dir = fresh_dir("half-request");
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  const std::string half_request =
      "exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/$MASTER_PORT; printf \"\\000\" >&3; kill -STOP $$; sleep 30'";
  auto run = std::async(std::launch::async, [&] {
    return spawn_shell(std::string(kWritePid) + "[ $RANK = 0 ] && " + half_request + "; exec sleep 30", 2, 1s);
  });
  if (run.wait_for(30s) != std::future_status::ready) {
    ADD_FAILURE() << "the launcher did not return within 30 s of a rank stopping mid-request";
    for (pid_t pid : wait_for_pids(pids_dir, 2, 1s)) kill(pid, SIGKILL);  // unblocks the store
  }
  const Spawned o = run.get();
  unsetenv("MAGIC_PID_DIR");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_LT(o.seconds, 8) << o.log;
  EXPECT_NE(o.log.find("rank 0 of 2"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("was stopped by signal 19 (SIGSTOP)"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("the store did not answer"), std::string::npos) << o.log;
  expect_gone(wait_for_pids(pids_dir, 2, 1s));
}

TEST(Launcher, AStatusThatCannotBeReadIsTwoNeverZero) {
  const std::string pids_dir = fresh_dir("unreadable");
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  auto run = std::async(std::launch::async, [] { return spawn_shell(std::string(kWritePid) + "exec sleep 1", 2); });
  wait_for_pids(pids_dir, 2);
  // Ignoring SIGCHLD under the running launcher makes the kernel reap its ranks.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, nullptr);
  auto o = run.get();
  unsetenv("MAGIC_PID_DIR");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  // The ranks' exits are noticed in one tick or two, so one or both are named.
  EXPECT_NE(o.log.find("could not learn the exit status of rank"), std::string::npos) << o.log;
}

TEST(Launcher, AnInterruptStopsTheRanksAtOnceAndRestoresTheHandlers) {
  const std::string pids_dir = fresh_dir("interrupt");
  struct sigaction before {
  }, after{};
  sigaction(SIGINT, nullptr, &before);
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  auto run = std::async(std::launch::async, [] { return spawn_shell(std::string(kWritePid) + "exec sleep 30", 2); });
  const auto pids = wait_for_pids(pids_dir, 2);
  const auto sent = Clock::now();
  kill(getpid(), SIGINT);  // the launcher's handler is in place: it installs it before forking
  auto o = run.get();
  unsetenv("MAGIC_PID_DIR");
  EXPECT_LT(Clock::now() - sent, 5s) << "not waiting for a rank to exit";
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_NE(o.log.find("interrupted by signal 2 (SIGINT)"), std::string::npos) << o.log;
  expect_gone(pids);
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(Launcher, LogsAreRemovedAfterASuccessfulRunAndAnEmptyRankZeroLogLeavesTheStreamUsable) {
  const std::string root = fresh_dir("logs");
  dist::SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"sh", "-c", "[ $RANK = 1 ] && echo 'rank 1 chatter' >&2; exit 0"};
  options.world_size = 2;
  options.log_root = root;
  std::ostringstream log;
  EXPECT_EQ(dist::spawn_ranks(options, log), 0);
  EXPECT_TRUE(log.good()) << "an empty rank-0 log must not set failbit on the stream";
  log << "still writable";
  EXPECT_EQ(log.str(), "still writable");
  EXPECT_TRUE(fs::is_empty(root)) << "the log directory is removed when every rank succeeded";
}

TEST(Launcher, AProgramThatCannotBeExecutedIsTwo) {
  dist::SpawnOptions options;
  options.program = "/nonexistent/rank-program";
  options.argv = {"rank-program"};
  options.world_size = 2;
  options.name = "launcher-test";
  options.log_root = logs_root();
  std::ostringstream log;
  EXPECT_EQ(dist::spawn_ranks(options, log), 2);
  EXPECT_NE(log.str().find("exited with code 127 (the program could not be executed)"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("cannot execute /nonexistent/rank-program"), std::string::npos) << log.str();
}

// spawn_ranks with `rank_main`, run by a helper process forked from this test (so that the
// launcher has no other thread, as in magic-check; a test process may have several). Every rank
// would execute /bin/false if it were executed rather than forked. The helper's stdout goes to
// `stdout_path`; its launcher log is returned.
Spawned spawn_forked(const std::function<int()>& rank_main, int64_t world_size, const std::string& stdout_path) {
  const std::string log_path = stdout_path + ".launcher-log";
  const auto start = Clock::now();
  const pid_t helper = fork();
  if (helper == 0) {
    const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    std::cout << "written before the fork, unflushed\n";  // must appear once, not once per rank
    dist::SpawnOptions options;
    options.program = "/bin/false";
    options.argv = {"false"};
    options.world_size = world_size;
    options.timeout = 5s;
    options.name = "launcher-test";
    options.log_root = logs_root();
    options.rank_main = rank_main;
    dist::RankFailure blamed;
    options.failure = &blamed;
    std::ofstream log(log_path);
    int code = 99;
    try {
      code = dist::spawn_ranks(options, log);
    } catch (const std::exception& e) {
      log << "threw: " << e.what() << "\n";
    }
    // The named rank, for the test to read back (the helper's memory is gone with it).
    log << "blamed rank " << blamed.rank << " kind " << blamed.kind << "\n";
    log.close();
    std::cout.flush();
    std::_Exit(code);
  }
  int status = 0;
  waitpid(helper, &status, 0);
  Spawned out;
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.log = testing::read_file(log_path);
  std::smatch blamed;
  if (std::regex_search(out.log, blamed, std::regex("blamed rank (-?\\d+) kind (\\S*)"))) {
    out.blamed.rank = std::stoi(blamed[1]);
    out.blamed.kind = blamed[2];
  }
  return out;
}

TEST(Launcher, RanksForkedFromASingleThreadedLauncherEnterTheProgramWithTheirVariables) {
  const std::string dir = fresh_dir("forked");
  const auto rank_main = [dir] {
    const std::string rank = std::getenv("RANK");
    std::ofstream(dir + "/rank-" + rank) << rank << " " << std::getenv("WORLD_SIZE") << " "
                                         << std::getenv("MASTER_PORT") << " " << getpid() << "\n";
    std::cout << "rank " << rank << " says hello\n";  // rank 0's stdout is the launcher's
    return rank == "0" ? 1 : 0;                       // 1: "a check failed", rank 0's verdict
  };
  const Spawned o = spawn_forked(rank_main, 3, dir + "/stdout");
  EXPECT_EQ(o.exit_code, 1) << "rank 0's code (2 if /bin/false had been executed)\n" << o.log;
  std::set<std::string> pids, ports;
  for (int r = 0; r < 3; ++r) {
    std::istringstream fields(testing::read_file(dir + "/rank-" + std::to_string(r)));
    std::string rank, world, port, pid;
    fields >> rank >> world >> port >> pid;
    EXPECT_EQ(rank, std::to_string(r));
    EXPECT_EQ(world, "3");
    EXPECT_NE(port, "0") << "the store's port, sent after the fork";
    ports.insert(port);
    pids.insert(pid);
  }
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(pids.size(), 3u) << "one process per rank";
  const std::string out = testing::read_file(dir + "/stdout");
  EXPECT_EQ(out, "written before the fork, unflushed\nrank 0 says hello\n");
}

TEST(Launcher, ALauncherWithAnotherThreadExecutesTheProgramInsteadOfForking) {
  const std::string dir = fresh_dir("not-forked");
  std::promise<void> release;
  std::thread other([future = release.get_future()] { future.wait(); });
  dist::SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"sh", "-c", "touch " + dir + "/executed-$RANK"};
  options.world_size = 2;
  options.name = "launcher-test";
  options.log_root = logs_root();
  options.rank_main = [dir] {
    std::ofstream(dir + "/forked");
    return 0;
  };
  std::ostringstream log;
  const int code = dist::spawn_ranks(options, log);
  release.set_value();
  other.join();
  EXPECT_EQ(code, 0) << log.str();
  EXPECT_TRUE(fs::exists(dir + "/executed-0"));
  EXPECT_TRUE(fs::exists(dir + "/executed-1"));
  EXPECT_FALSE(fs::exists(dir + "/forked")) << "forked although another thread was running";
}

// Rank 1 dies by SIGKILL; rank 0, "waiting in all_gather", fails because of it and exits at once,
// mostly within the launcher's same 50 ms poll: the peer that was killed is the cause, whichever
// of the two the poll happened to see first.
// Until `pid` is a zombie or reaped.
void wait_until_dead(pid_t pid) {
  for (;;) {
    const std::string stat = testing::read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z")) return;
    std::this_thread::sleep_for(1ms);
  }
}

TEST(Launcher, ARankThatFailsWaitingForAKilledPeerDoesNotHideThePeer) {
  const std::string pids_dir = fresh_dir("waiter");
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove_all(pids_dir);
    fs::create_directories(pids_dir);
    setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
    const auto rank_main = [pids_dir] {
      const dist::Rendezvous r = dist::Rendezvous::from_env();
      dist::write_rank_pid_file(r.rank);
      if (r.rank == 1) raise(SIGKILL);
      c10d::TCPStoreOptions client;
      client.port = static_cast<uint16_t>(r.master_port);
      client.isServer = false;
      client.waitWorkers = false;
      c10d::TCPStore store(r.master_addr, client);
      dist::write_progress(store, 0, {true, "REPLAY step 3", "all_gather on group 'world'"});
      wait_until_dead(wait_for_pids(pids_dir, 2)[1]);
      std::cerr << "launcher-test: rank 0: distributed failure: all_gather failed: a peer died\n";
      return 2;
    };
    const Spawned o = spawn_forked(rank_main, 2, pids_dir + "/stdout");
    unsetenv("MAGIC_PID_DIR");
    EXPECT_EQ(o.exit_code, 2) << o.log;
    EXPECT_NE(o.log.find("rank 1 of 2"), std::string::npos) << o.log;
    EXPECT_NE(o.log.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << o.log;
  }
}

// A peer closes its connections before its status can be read, and a rank writing to one dies of
// SIGPIPE in between: here the peer's death is seen 30 ms after the SIGPIPE (three polls). The
// peer is named, not the rank that wrote to it.
TEST(Launcher, ARankKilledBySigpipeDoesNotHideThePeerWhoseDeathCausedIt) {
  const std::string pids_dir = fresh_dir("sigpipe");
  setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
  const auto rank_main = [pids_dir] {
    const dist::Rendezvous r = dist::Rendezvous::from_env();
    dist::write_rank_pid_file(r.rank);
    if (r.rank == 0) raise(SIGPIPE);
    wait_until_dead(wait_for_pids(pids_dir, 2)[0]);
    std::this_thread::sleep_for(30ms);
    raise(SIGKILL);
    return 0;
  };
  const Spawned o = spawn_forked(rank_main, 2, pids_dir + "/stdout");
  unsetenv("MAGIC_PID_DIR");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_NE(o.log.find("rank 1 of 2 (pid"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("rank 0: was killed by signal 13 (SIGPIPE)"), std::string::npos) << o.log;
}

// A store client of the launcher's store, as a rank connects to it.
std::unique_ptr<c10d::TCPStore> connect_to_launcher(const dist::Rendezvous& r) {
  c10d::TCPStoreOptions client;
  client.port = static_cast<uint16_t>(r.master_port);
  client.isServer = false;
  client.waitWorkers = false;
  return std::make_unique<c10d::TCPStore>(r.master_addr, client);
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Issue 42 item 7. Rank 0, a bystander, fails waiting in a collective and exits first; rank 1
// raises its own error 30 ms after rank 0 is gone (three polls), so the launcher sees the
// bystander's failure first. Each leaves its record as a real rank does (Runtime::record_failure).
// The raiser is named, with its phase and message, and the bystander follows on its own line.
TEST(Launcher, ARankWithItsOwnErrorIsNamedBeforeABystanderThatFailedFirst) {
  const std::string pids_dir = fresh_dir("own-error");
  for (int attempt = 0; attempt < 4; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    fs::remove_all(pids_dir);
    fs::create_directories(pids_dir);
    setenv("MAGIC_PID_DIR", pids_dir.c_str(), 1);
    const auto rank_main = [pids_dir] {
      const dist::Rendezvous r = dist::Rendezvous::from_env();
      dist::write_rank_pid_file(r.rank);
      const auto store = connect_to_launcher(r);
      const std::string phase = "step gradients at step 0";
      if (r.rank == 0) {
        const std::string waiting = "all_reduce on group 'world'";
        dist::write_progress(*store, 0, {true, phase, waiting});
        dist::write_failure(*store, {0, false, "distributed failure", phase, waiting,
                                     "rank 0: all_reduce on group 'world' failed: a peer died", now_us()});
        std::cerr << "launcher-test: rank 0: distributed failure: rank 0: all_reduce failed: a peer died\n";
        return 2;
      }
      wait_until_dead(wait_for_pids(pids_dir, 2)[0]);
      std::this_thread::sleep_for(30ms);
      dist::write_failure(*store, {1, true, "failed", phase, "", "index out of range in self", now_us()});
      std::cerr << "launcher-test: rank 1: failed: index out of range in self\n";
      return 2;
    };
    const Spawned o = spawn_forked(rank_main, 2, pids_dir + "/stdout");
    unsetenv("MAGIC_PID_DIR");
    EXPECT_EQ(o.exit_code, 2) << "the launcher's code; the tool makes it 1\n" << o.log;
    EXPECT_NE(o.log.find("launcher-test: rank 1 of 2 (pid "), std::string::npos) << o.log;
    EXPECT_NE(o.log.find(") failed with its own error in phase 'step gradients at step 0': failed: index out of "
                         "range in self; its log: "),
              std::string::npos)
        << o.log;
    EXPECT_NE(o.log.find("launcher-test:   rank 0: exited with code 2 after waiting in all_reduce on group 'world' "
                         "in phase 'step gradients at step 0'\n"),
              std::string::npos)
        << o.log;
    EXPECT_EQ(o.log.find("rank 0 of 2"), std::string::npos) << "the bystander is not the headline\n" << o.log;
    EXPECT_EQ(o.blamed.rank, 1) << o.log;
    EXPECT_EQ(o.blamed.kind, "failed") << o.log;
  }
}

// Two ranks raise errors of their own: the earlier one is named (the records' wall-clock times),
// and the later one keeps its message on its own line.
TEST(Launcher, OfTwoRanksWithTheirOwnErrorsTheEarlierIsNamed) {
  const auto rank_main = [] {
    const dist::Rendezvous r = dist::Rendezvous::from_env();
    const auto store = connect_to_launcher(r);
    // Rank 1 records first, rank 0 a second later (rank 0's exit is seen first in most polls).
    const int64_t at = now_us() + (r.rank == 1 ? 0 : 1000000);
    dist::write_failure(*store, {r.rank, true, "failed", "REPLAY step 1", "", "planted " + std::to_string(r.rank), at});
    return 2;
  };
  const Spawned o = spawn_forked(rank_main, 2, fresh_dir("two-own") + "/stdout");
  EXPECT_EQ(o.exit_code, 2) << o.log;
  EXPECT_NE(o.log.find("rank 1 of 2 (pid "), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("launcher-test:   rank 0: exited with code 2 in phase 'REPLAY step 1': failed: planted 0\n"),
            std::string::npos)
      << o.log;
  EXPECT_EQ(o.blamed.rank, 1) << o.log;
}

// A crash signal is the code under test failing (magic-check exits 1 for it); a signal sent from
// outside, as SIGKILL, is a failed run (2). No core file is left behind.
TEST(Launcher, ACrashSignalFailsTheCheckAndAKillDoesNot) {
  auto crashed = spawn_shell("ulimit -c 0; [ $RANK = 1 ] && kill -SEGV $$; exec sleep 30", 2);
  EXPECT_EQ(crashed.exit_code, 2) << crashed.log;
  EXPECT_NE(crashed.log.find("rank 1 of 2"), std::string::npos) << crashed.log;
  EXPECT_NE(crashed.log.find("was killed by signal 11 (SIGSEGV)"), std::string::npos) << crashed.log;
  EXPECT_EQ(crashed.blamed.rank, 1);
  EXPECT_EQ(crashed.blamed.kind, "crashed");
  EXPECT_TRUE(dist::fails_the_check(crashed.blamed));
  auto killed = spawn_shell("[ $RANK = 1 ] && kill -KILL $$; exec sleep 30", 2);
  EXPECT_EQ(killed.exit_code, 2) << killed.log;
  EXPECT_EQ(killed.blamed.rank, 1);
  EXPECT_EQ(killed.blamed.kind, "killed");
  EXPECT_FALSE(dist::fails_the_check(killed.blamed));
}

TEST(Launcher, AWorldAboveTheLimitIsRefusedBeforeAnyFork) {
  const std::string marks = fresh_dir("limit");
  dist::SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"sh", "-c", "touch " + marks + "/$RANK"};
  options.world_size = 5000;
  std::ostringstream log;
  EXPECT_THROW(dist::spawn_ranks(options, log), InputError);
  options.world_size = 0;
  EXPECT_THROW(dist::spawn_ranks(options, log), InputError);
  EXPECT_TRUE(fs::is_empty(marks));

  const std::string pids_dir = fresh_dir("limit-cli");
  const auto start = Clock::now();
  auto o =
      testing::run_command("MAGIC_PID_DIR=" + pids_dir + " " + MAGIC_CHECK_BINARY + " --topology dp=5000 --batch 40");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--topology dp=5000: a world of 5000 ranks is above the built-in launcher's limit of 64"),
            std::string::npos)
      << o.output;
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_TRUE(fs::is_empty(pids_dir)) << "no rank was started";
}

// magic-check itself, as the issue reported it: under a parent that ignores SIGCHLD.
TEST(LauncherCli, IgnoredSigchldStillGivesTheChecksVerdict) {
  const std::string ignoring = R"(perl -e '$SIG{CHLD}="IGNORE"; exec @ARGV' )" + std::string(MAGIC_CHECK_BINARY);
  auto failing =
      testing::run_command(ignoring + " --topology dp=2 --mutate extra-divide-scores --checks replay --steps 1");
  EXPECT_EQ(failing.exit_code, 1) << failing.output;
  auto passing = testing::run_command(ignoring + " --topology dp=2 --checks scores --steps 1");
  EXPECT_EQ(passing.exit_code, 0) << passing.output;
}

// SIGSTOPs `victim` `delay` after every rank has written its pid file; returns the output and
// the seconds from the stop to the end of the command.
struct StoppedRun {
  testing::CommandOutcome outcome;
  double seconds_after_stop = 0;
  std::vector<pid_t> pids;
};
StoppedRun stop_a_rank(const std::string& args, int world_size, int victim, std::chrono::milliseconds delay,
                       const std::string& pids_dir) {
  // These runs end within seconds of the stop: a minute's limit makes a hang fail the test with
  // its output, well before ctest's timeout.
  auto run = std::async(std::launch::async, [&] {
    return testing::run_command(
        "TMPDIR=" + logs_root() + " MAGIC_PID_DIR=" + pids_dir + " " + MAGIC_CHECK_BINARY + " " + args, 60s);
  });
  StoppedRun out;
  try {
    out.pids = wait_for_pids(pids_dir, world_size, 30s);
  } catch (const std::runtime_error& e) {
    out.outcome = run.get();
    ADD_FAILURE() << e.what() << "; the run said:\n" << out.outcome.output;
    return out;
  }
  std::this_thread::sleep_for(delay);
  EXPECT_EQ(kill(out.pids[victim], SIGSTOP), 0);
  const auto stopped = Clock::now();
  out.outcome = run.get();
  out.seconds_after_stop = std::chrono::duration<double>(Clock::now() - stopped).count();
  return out;
}

TEST(LauncherCli, AStoppedRankIsNamedWithItsPhaseWithinTheBound) {
  const std::string pids_dir = fresh_dir("cli-stopped");
  // --bite: several seconds of work, so the stop lands inside a pipeline.
  auto s = stop_a_rank("--topology dp=4 --timeout 3 --bite", 4, 2, 1500ms, pids_dir);
  const auto& o = s.outcome;
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_LT(s.seconds_after_stop, 3 + 6) << o.output;
  std::smatch named;
  ASSERT_TRUE(std::regex_search(o.output, named,
                                std::regex("rank 2 of 4 \\(pid \\d+\\) was stopped by signal 19 \\(SIGSTOP\\).* in "
                                           "phase '([^']+)'")))
      << o.output;
  EXPECT_NE(named[1], "unknown") << o.output;
  EXPECT_NE(named[1], "startup") << o.output;
  expect_no_stack_frames(o.output);
  expect_gone(s.pids);
}

TEST(LauncherCli, AStopDuringGroupCreationGivesOneLinePerRankAndNoStackTrace) {
  const std::string pids_dir = fresh_dir("cli-group");
  // The pid file is written just before the rendezvous: the stop lands in startup, rendezvous or
  // group creation, where the others wait in the store (a raw c10d stack trace before the fix).
  auto s = stop_a_rank("--topology dp=4 --timeout 3", 4, 1, 0ms, pids_dir);
  const auto& o = s.outcome;
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_LT(s.seconds_after_stop, 3 + 6) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 4"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("was stopped by signal 19 (SIGSTOP)"), std::string::npos) << o.output;
  expect_no_stack_frames(o.output);
  expect_gone(s.pids);
}

}  // namespace
}  // namespace magic
