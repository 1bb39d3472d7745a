// Resume: a run killed during training or REPLAY (SIGKILL, no cleanup: MAGIC_INTERRUPT_AT,
// interrupt_hook.h) and continued with --resume gives scores bit-identical to a run that was
// never interrupted; the run's folder in spill_dir is removed when a run finishes or cannot
// succeed, kept when it was interrupted or --keep-checkpoints asks; every misuse exits 2.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/replay_journal.h"
#include "lib/train/run_folder.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  fs::remove_all(dir);
  return dir;
}

// The tiny run (12 steps: six sqrt checkpoints 0, 3, 6, 9, 10, 11) spilling under `spill`.
std::string resumable_config(const std::string& name, const std::string& spill,
                             const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json j = testing::tiny_run_json({});
  j["data"]["train"] = testing::source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  j["training"]["steps"] = 12;
  j["training"]["spill_dir"] = spill;
  if (edit) edit(j);
  const std::string path = ::testing::TempDir() + "/" + name + ".json";
  std::ofstream(path) << j.dump(2);
  return path;
}

testing::CommandOutcome magic_run(const std::string& args, const std::string& interrupt = "") {
  const std::string env = interrupt.empty() ? "" : "MAGIC_INTERRUPT_AT=" + interrupt + " ";
  return testing::run_command(env + MAGIC_RUN_BINARY + " " + args);
}

at::Tensor scores_in(const std::string& out) {
  return load_safetensors(out + "/scores.safetensors").tensors.at("scores");
}

// The run folders (magic-run-*) under `spill`.
std::vector<fs::path> run_folders(const std::string& spill) {
  std::vector<fs::path> folders;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(spill, ec)) {
    if (e.path().filename().string().rfind("magic-run-", 0) == 0) folders.push_back(e.path());
  }
  return folders;
}

// Kills a run at `interrupt`, checks that a plain rerun refuses, resumes it, and returns the
// resumed run's scores; the folder must be gone afterwards.
at::Tensor interrupted_then_resumed(const std::string& args, const std::string& spill, const std::string& interrupt,
                                    const std::string& out) {
  testing::CommandOutcome killed = magic_run(args + " --out " + out, interrupt);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_FALSE(fs::exists(out + "/scores.safetensors")) << "a killed run wrote scores";
  EXPECT_EQ(run_folders(spill).size(), 1u) << "the interrupted run's checkpoints are not in spill_dir";
  testing::CommandOutcome again = magic_run(args + " --out " + out);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("pass --resume to continue it, or --restart"), std::string::npos) << again.output;
  testing::CommandOutcome resumed = magic_run(args + " --out " + out + " --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming: training from the checkpoint at step "), std::string::npos)
      << resumed.output;
  EXPECT_TRUE(run_folders(spill).empty()) << "a finished run left its checkpoints";
  return scores_in(out);
}

TEST(Resume, AKilledRunResumedDuringTrainingOrReplayGivesBitIdenticalScores) {
  const std::string spill = fresh_dir("resume-spill");
  const std::string config = resumable_config("resume", spill);
  const std::string args = "--config " + config;
  const std::string ref = fresh_dir("resume-ref");
  ASSERT_EQ(magic_run(args + " --out " + ref).exit_code, 0);
  EXPECT_TRUE(run_folders(spill).empty()) << "a finished run left its checkpoints";
  const at::Tensor expected = scores_in(ref);
  for (const std::string at : {"training:5", "replay:7"}) {
    SCOPED_TRACE(at);
    const at::Tensor resumed = interrupted_then_resumed(args, spill, at, fresh_dir("resume-" + at));
    EXPECT_TRUE(at::equal(resumed, expected)) << "max |difference| " << (resumed - expected).abs().max().item<double>();
  }
}

// Per query, all queries in one pass: the kill falls in REPLAY after its first segments, and every
// query continues from the segment record that holds all their λs and partial scores.
TEST(Resume, PerQueryResumesEveryQueryFromOneSegmentRecord) {
  const std::string spill = fresh_dir("resume-pq-spill");
  const std::string args = "--config " + resumable_config("resume-pq", spill) + " --per-query";
  const std::string ref = fresh_dir("resume-pq-ref");
  ASSERT_EQ(magic_run(args + " --out " + ref).exit_code, 0);
  const at::Tensor resumed = interrupted_then_resumed(args, spill, "replay:16", fresh_dir("resume-pq"));
  EXPECT_TRUE(at::equal(resumed, scores_in(ref)));
}

// Under tp each rank checkpoints its own pieces of the split parameters: one tp rank killed in
// REPLAY, and the resumed run's scores are the uninterrupted tp run's, bit for bit.
TEST(Resume, ATensorParallelRunResumesFromEachRanksPieces) {
  const std::string spill = fresh_dir("resume-tp-spill");
  const std::string args = "--config " + resumable_config("resume-tp", spill) + " --topology tp=2";
  const std::string ref = fresh_dir("resume-tp-ref");
  ASSERT_EQ(magic_run(args + " --out " + ref).exit_code, 0);
  const at::Tensor resumed = interrupted_then_resumed(args, spill, "replay:7:rank=1", fresh_dir("resume-tp"));
  EXPECT_TRUE(at::equal(resumed, scores_in(ref)));
}

// Ranks killed at different moments: rank 1 dies after the last step of a REPLAY segment before
// recording it, rank 0 records it and waits. Both continue from the segment rank 1 recorded.
TEST(Resume, RanksThatStoppedAtDifferentSegmentsContinueFromTheSameOne) {
  const std::string spill = fresh_dir("resume-dp-spill");
  const std::string args = "--config " + resumable_config("resume-dp", spill) + " --topology dp=2,fsdp=2";
  const std::string ref = fresh_dir("resume-dp-ref"), out = fresh_dir("resume-dp");
  ASSERT_EQ(magic_run(args + " --out " + ref).exit_code, 0);
  // REPLAY steps 11, 10, 9, 8, 7, 6: the sixth closes the segment [6, 9), progress 4.
  testing::CommandOutcome killed = magic_run(args + " --out " + out, "replay:6:rank=1");
  EXPECT_EQ(killed.exit_code, 2) << killed.output;
  EXPECT_NE(killed.output.find("rank 1 of 2"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("run the same command with --resume"), std::string::npos) << killed.output;
  const std::vector<fs::path> folders = run_folders(spill);
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_TRUE(fs::exists(folders[0] / "rank-0" / "replay-4.safetensors"));
  EXPECT_FALSE(fs::exists(folders[0] / "rank-1" / "replay-4.safetensors"));
  EXPECT_TRUE(fs::exists(folders[0] / "rank-0" / "replay-3.safetensors"));  // kept for this case
  testing::CommandOutcome resumed = magic_run(args + " --out " + out + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("REPLAY after 3 of 12 steps"), std::string::npos) << resumed.output;
  EXPECT_TRUE(at::equal(scores_in(out), scores_in(ref)));
  EXPECT_TRUE(run_folders(spill).empty());
}

TEST(Resume, FolderLifecycleAndMisuse) {
  const std::string spill = fresh_dir("resume-life-spill");
  const std::string config = resumable_config("resume-life", spill);
  const auto expect_bad = [](const testing::CommandOutcome& o, const std::string& fragment) {
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("examples from"), std::string::npos) << "started before refusing:\n" << o.output;
  };
  expect_bad(magic_run("--config " + config + " --resume --restart"), "--resume and --restart: choose one");
  expect_bad(magic_run("--config " + config + " --resume"), "--resume: no interrupted run of this config and layout");
  const std::string in_memory =
      resumable_config("resume-memory", spill, [](nlohmann::json& j) { j["training"].erase("spill_dir"); });
  expect_bad(magic_run("--config " + in_memory + " --resume"), "has no training.spill_dir");
  expect_bad(magic_run("--config " + in_memory + " --keep-checkpoints"), "has no training.spill_dir");
  EXPECT_TRUE(run_folders(spill).empty());

  // --keep-checkpoints keeps a finished run's folder; the next run must choose; --restart discards it.
  testing::CommandOutcome kept = magic_run("--config " + config + " --keep-checkpoints");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_NE(kept.output.find("(--keep-checkpoints)"), std::string::npos) << kept.output;
  ASSERT_EQ(run_folders(spill).size(), 1u);
  const fs::path folder = run_folders(spill)[0];
  EXPECT_TRUE(fs::exists(folder / "rank-0" / "step-11.safetensors"));
  expect_bad(magic_run("--config " + config), "pass --resume to continue it, or --restart");

  // A folder held by a live process (its lock) is refused, naming the holder.
  {
    const int fd = ::open((folder / "lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    expect_bad(magic_run("--config " + config + " --restart"), "is in use by a running magic-run");
    ::close(fd);
  }
  testing::CommandOutcome restarted = magic_run("--config " + config + " --restart");
  EXPECT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_EQ(restarted.output.find("resuming"), std::string::npos) << restarted.output;
  EXPECT_TRUE(run_folders(spill).empty());

  // A run that stops on a non-finite value cannot succeed by resuming: its folder goes too.
  const std::string divergent = resumable_config("resume-divergent", spill, [](nlohmann::json& j) {
    j["optimizer"] = {{"name", "sgd"}, {"lr", 1e300}};
  });
  EXPECT_EQ(magic_run("--config " + divergent).exit_code, 1);
  EXPECT_TRUE(run_folders(spill).empty());

  // Another config's interrupted folder is pointed out, not touched.
  const std::string other =
      resumable_config("resume-other", spill, [](nlohmann::json& j) { j["optimizer"]["lr"] = 0.02; });
  EXPECT_NE(magic_run("--config " + other, "training:3").exit_code, 0);
  testing::CommandOutcome noted = magic_run("--config " + config);
  EXPECT_EQ(noted.exit_code, 0) << noted.output;
  EXPECT_NE(noted.output.find("also holds 1 folder of interrupted runs of other configs"), std::string::npos)
      << noted.output;
  EXPECT_EQ(run_folders(spill).size(), 1u);
}

// A write cut short by a kill leaves "<file>.partial.<pid>" (atomic_file.h): no run reads it, so the
// folder's owner removes it when it keeps the folder (where it alone is no work to resume) and
// when it resumes a folder a killed process could not settle.
TEST(Resume, APartialFileOfAKilledWriteIsRemovedWhenTheFolderIsSettledOrResumed) {
  const std::string spill = fresh_dir("resume-partial-spill");
  RunIdentity id;
  id.text = "a test's identity";
  id.hash = 46;
  {
    RunFolderLease lease = RunFolderLease::acquire(spill, id, ResumeMode::kFresh);
    fs::create_directories(lease.path() + "/rank-0");
    std::ofstream(lease.path() + "/rank-0/replay-3.safetensors.partial.99") << "half";
    std::ostringstream said;
    settle_run_folder(lease, RunOutcome::kInterrupted, false, said);
    EXPECT_TRUE(run_folders(spill).empty()) << "a folder holding only a partial file was kept: " << said.str();
  }
  std::string folder;
  {
    RunFolderLease killed = RunFolderLease::acquire(spill, id, ResumeMode::kFresh);
    folder = killed.path();
    fs::create_directories(folder + "/rank-1");
    std::ofstream(folder + "/rank-1/step-0.safetensors") << "a checkpoint";
    std::ofstream(folder + "/rank-1/step-3.safetensors.partial.99") << "half";
  }  // not settled, as when the process is killed
  RunFolderLease resumed = RunFolderLease::acquire(spill, id, ResumeMode::kResume);
  EXPECT_TRUE(fs::exists(folder + "/rank-1/step-0.safetensors"));
  EXPECT_FALSE(fs::exists(folder + "/rank-1/step-3.safetensors.partial.99"));
  resumed.remove();
  EXPECT_TRUE(run_folders(spill).empty());
}

// Files read back are input: a kept run's checkpoint with one bit flipped in a value's exponent, a
// truncated one, an empty one and one copied from another step are each refused by --resume with
// exit 2, naming the file and its step; the undamaged folder then resumes.
TEST(Resume, ADamagedTruncatedEmptyOrForeignCheckpointIsRefusedNamingItsFileAndStep) {
  const std::string spill = fresh_dir("resume-damaged-spill");
  const std::string config = resumable_config("resume-damaged", spill);
  ASSERT_EQ(magic_run("--config " + config + " --keep-checkpoints").exit_code, 0);
  ASSERT_EQ(run_folders(spill).size(), 1u);
  const fs::path rank = run_folders(spill)[0] / "rank-0";
  const fs::path victim = rank / "step-10.safetensors", backup = rank / "step-10.keep";
  fs::copy_file(victim, backup);
  const auto restore = [&] { fs::copy_file(backup, victim, fs::copy_options::overwrite_existing); };
  const auto expect_refused = [&](const std::string& what, const std::string& fragment) {
    testing::CommandOutcome o = magic_run("--config " + config + " --resume");
    EXPECT_EQ(o.exit_code, 2) << what << "\n" << o.output;
    EXPECT_NE(o.output.find("the checkpoint of step 10: " + victim.string()), std::string::npos) << what << "\n"
                                                                                                 << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << what << "\n" << o.output;
    EXPECT_EQ(o.output.find("query loss"), std::string::npos) << what << ": ran on\n" << o.output;
  };

  // One bit of the first value's exponent (the eighth byte of a little-endian fp64).
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    const auto at = static_cast<std::streamoff>(8 + header + 7);
    char byte = 0;
    f.seekg(at);
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(at);
    f.write(&byte, 1);
  }
  expect_refused("a flipped bit", "does not match");
  restore();
  fs::resize_file(victim, fs::file_size(victim) - 100);
  expect_refused("truncated", "not a valid safetensors file");
  restore();
  fs::resize_file(victim, 0);
  expect_refused("empty", "shorter than the 8-byte header length");
  fs::copy_file(rank / "step-9.safetensors", victim, fs::copy_options::overwrite_existing);
  expect_refused("another step's file", "belongs to another run or record");
  restore();
  fs::remove(backup);
  // A REPLAY journal record is verified the same way when it is read: the finished one, the latest.
  const ReplayJournal journal(rank.string(), 6, 1);  // 12 steps, sqrt: 6 segments
  ASSERT_EQ(journal.latest(), 6);
  const fs::path record = rank / "replay-6.safetensors";
  ASSERT_TRUE(fs::exists(record));
  const fs::path record_backup = rank / "replay-6.keep";
  fs::copy_file(record, record_backup);
  fs::resize_file(record, fs::file_size(record) - 1);
  testing::CommandOutcome o = magic_run("--config " + config + " --resume");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the REPLAY journal's record 6: " + record.string()), std::string::npos) << o.output;
  fs::rename(record_backup, record);
  testing::CommandOutcome resumed = magic_run("--config " + config + " --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

// In process: the pipeline with a run folder gives the in-memory scores exactly, and REPLAY
// continued from each segment boundary's record gives the uninterrupted result exactly.
TEST(Resume, ReplayContinuedFromEverySegmentBoundaryIsExact) {
  testing::TinyRun r;
  r.steps = 12;
  const LmProblem p = testing::tiny_lm_problem(r);
  MagicOptions memory;
  const MagicResult expected = run_magic(*p.step, *p.query, p.initial, p.weights, memory);
  MagicOptions on_disk;
  on_disk.resume_folder = fresh_dir("resume-inproc") + "/rank-0";
  const MagicResult persisted = run_magic(*p.step, *p.query, p.initial, p.weights, on_disk);
  EXPECT_TRUE(at::equal(persisted.scores, expected.scores));

  CheckpointStore store =
      CheckpointStore::persistent(checkpoint_steps(CheckpointSchedule::kSqrt, 12), *on_disk.resume_folder);
  ASSERT_EQ(store.count(), 6);  // the finished run left them (the folder is the tool's to remove)
  ReplayBackward replay(*p.step, store, p.weights);
  std::vector<ReplayResume> boundaries;
  const ReplayResult full =
      replay.run(expected.query_gradient, nullptr, [&](const ReplayResume& after) { boundaries.push_back(after); });
  ASSERT_EQ(boundaries.size(), 6u);
  EXPECT_TRUE(at::equal(full.dw, expected.scores));
  for (const ReplayResume& from : boundaries) {
    const ReplayResult resumed = replay.run(expected.query_gradient, &from);
    EXPECT_TRUE(at::equal(resumed.dw, full.dw)) << "resumed after " << from.segments_done << " segments";
  }
}

// The journal keeps the two latest records, each holding every query's λ and dQ/dw, and refuses by
// name a record that lacks a query or lies beyond the run's segments.
TEST(Resume, JournalKeepsTheTwoLatestRecordsOfEveryQuery) {
  const std::string folder = fresh_dir("journal");
  fs::create_directories(folder);
  const ReplayJournal journal(folder, 4, 2);
  EXPECT_EQ(journal.latest(), 0);
  const auto after = [](int64_t p) {
    ReplayResume r{p, {}, {}};
    for (int64_t j = 0; j < 2; ++j) {
      TrainState lambda;
      lambda.params.insert("w", at::full({2}, double(10 * p + j), at::kDouble));
      r.lambdas.push_back(lambda);
      r.dws.push_back(at::full({3}, double(p + j), at::kDouble));
    }
    return r;
  };
  for (int64_t p = 1; p <= 3; ++p) journal.record(after(p));
  EXPECT_FALSE(fs::exists(folder + "/replay-1.safetensors"));
  EXPECT_TRUE(fs::exists(folder + "/replay-2.safetensors"));
  EXPECT_EQ(journal.latest(), 3);
  const ReplayResume r = journal.resume(2);
  EXPECT_EQ(r.segments_done, 2);
  ASSERT_EQ(r.dws.size(), 2u);
  for (int64_t j = 0; j < 2; ++j) {
    EXPECT_TRUE(at::equal(r.dws[j], at::full({3}, double(2 + j), at::kDouble))) << "query " << j;
    EXPECT_TRUE(at::equal(r.lambdas[j].params.at("w"), at::full({2}, double(20 + j), at::kDouble))) << "query " << j;
  }
  journal.record(after(4));  // finished
  EXPECT_EQ(journal.latest(), 4);
  EXPECT_FALSE(fs::exists(folder + "/replay-2.safetensors"));
  // A journal of three queries reads a two-query record as lacking query 2.
  const ReplayJournal three(folder, 4, 3);
  try {
    three.resume(4);
    ADD_FAILURE() << "a record without query 2 was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the REPLAY journal's record 4 has no q2.dw (query 2 of 3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(journal.resume(5), InputError);
}

}  // namespace
}  // namespace magic
