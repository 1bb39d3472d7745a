// A resumable magic-run's own folder under the config's training.spill_dir, named by what fixes
// its scores, so that an interrupted run can be continued (magic-run --resume):
//   <spill_dir>/magic-run-<16 hex digits>/manifest.json  what the run is (its identity)
//   <spill_dir>/magic-run-<...>/lock                     held (flock) by the process that owns the run
//   <spill_dir>/magic-run-<...>/rank-<r>/                each rank's checkpoints and REPLAY journal
// A run that finished, or stopped on a non-finite value (resuming cannot change that), has its
// folder removed unless --keep-checkpoints. One interrupted any other way (a signal, a lost rank,
// a full disk) keeps it: the next run of the same config says --resume (continue from it) or
// --restart (discard it and begin again); without either it exits 2 rather than guess.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lib/train/run_config.h"

namespace magic {

// What fixes a run's checkpoints and scores: the config (as parsed JSON), the bytes of its data
// and init files, the layout, and whether REPLAY runs per query.
struct RunIdentity {
  std::string text;
  uint64_t hash = 0;  // FNV-1a of text: the folder's name (the manifest keeps the whole text)
};
RunIdentity run_identity(const RunConfig& config, const std::string& config_path, const std::string& layout,
                         bool per_query);

// "<bytes> bytes, FNV-1a <16 hex digits>" of a file's content; InputError where it cannot be read.
std::string file_fingerprint(const std::string& path);

std::string run_folder_path(const std::string& spill_dir, const RunIdentity& identity);
std::string rank_folder_path(const std::string& run_folder, int rank);

enum class ResumeMode { kFresh, kResume, kRestart };

// The owner of a run's folder: holds its lock for as long as it lives.
class RunFolderLease {
 public:
  // Checks and prepares the folder; throws InputError (exit 2) when a fresh run finds one already
  // there, --resume finds none or one of another run, or another process holds it.
  // `notes` (when given) hears about other runs' folders left in spill_dir.
  static RunFolderLease acquire(const std::string& spill_dir, const RunIdentity& identity, ResumeMode mode,
                                std::ostream* notes = nullptr);
  RunFolderLease(RunFolderLease&& other) noexcept;
  RunFolderLease(const RunFolderLease&) = delete;
  RunFolderLease& operator=(const RunFolderLease&) = delete;
  RunFolderLease& operator=(RunFolderLease&& other) noexcept;
  ~RunFolderLease();

  const std::string& path() const { return path_; }
  bool resumed() const { return resumed_; }
  // Removes the folder (a finished or hopeless run).
  void remove();
  // Whether any rank has written a checkpoint or REPLAY record (something to resume from).
  bool holds_work() const;

 private:
  RunFolderLease(std::string path, int lock_fd, bool resumed)
      : path_(std::move(path)), lock_fd_(lock_fd), resumed_(resumed) {}
  std::string path_;
  int lock_fd_ = -1;
  bool resumed_ = false;
};

enum class RunOutcome {
  kFinished,     // scores written
  kHopeless,     // stopped on a non-finite value: resuming would stop there again
  kInterrupted,  // anything else: a lost rank, a failed write, a signal
};

// Removes the folder of a finished or hopeless run unless `keep`; keeps an interrupted one that
// holds work and says how to resume it on `out`.
void settle_run_folder(RunFolderLease& lease, RunOutcome outcome, bool keep, std::ostream& out);

// Throws InputError naming `flag` unless the config has a spill_dir (checkpoints in memory do
// not outlive the process).
void require_spill_dir(const RunConfig& config, const std::string& flag);

}  // namespace magic
