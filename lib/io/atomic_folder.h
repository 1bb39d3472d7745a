// A folder written whole: its files are made in a hidden sibling folder, which is renamed onto the
// destination only once every file is there. A reader (magic-compare reading a dump, another
// implementation replaying an exported plan, a user) then sees the whole folder or none of it,
// never a run that stopped half way. A sibling left by a process that was killed while filling it
// is removed by the next write at the same place, once no process of that pid is alive here.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace magic {

// The hidden sibling being filled. Its destructor removes it unless it was published, so that an
// exception or a failed rank leaves the destination as it was.
class StagedFolder {
 public:
  // Makes ".<name>.partial-<pid>-XXXXXX" beside `path`; InputError naming `flag` where it cannot.
  StagedFolder(const std::string& path, const std::string& flag);
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;
  ~StagedFolder();

  const std::string& dir() const { return dir_; }

  // Renames the sibling onto `path`, which must not exist or be an empty directory: rename(2)
  // replaces an empty directory but never merges into a full one. InputError where it cannot.
  void publish();
  // Swaps the sibling with the folder at `path` in one step (renameat2's RENAME_EXCHANGE), then
  // removes the old folder; plain publish() where nothing is there yet.
  void publish_replacing();

 private:
  std::filesystem::path target_;
  std::string path_, flag_, dir_;
  bool published_ = false;
};

// `message` with each mention of a StagedFolder's `dir` replaced by its destination `path`: an error
// names the place the user asked for, not the hidden sibling.
std::string naming_destination(std::string message, const std::string& dir, const std::string& path);

// Checks, before any expensive work, that `path` can become the folder: it does not exist or is
// an empty directory, and it can be created there (output_path.h). InputError naming `flag`.
void require_new_folder(const std::string& path, const std::string& flag);

// Calls `fill` with a fresh StagedFolder's directory, then publishes it onto `path`. If `fill`
// throws, or the rename fails (say `path` filled up meanwhile), `path` is left as it was; the error
// propagates (InputError for the rename).
void write_folder_atomically(const std::string& path, const std::string& flag,
                             const std::function<void(const std::string& temp_dir)>& fill);

// A folder a tool writes again on each run (magic-run's --out): it may exist already, holding only
// files named in `ours` (the last run's), or nothing. Checked before any expensive work, InputError
// naming `flag` and the first file that is not ours: replacing the folder removes what it holds.
void require_replaceable_folder(const std::string& path, const std::string& flag, const std::vector<std::string>& ours);

// As write_folder_atomically, but the new folder takes the place of the last run's
// (publish_replacing): a reader sees the old run's files together or the new run's, never a mix,
// and a run that fails part way (a full disk, a kill) leaves the old folder as it was.
void replace_folder_atomically(const std::string& path, const std::string& flag, const std::vector<std::string>& ours,
                               const std::function<void(const std::string& temp_dir)>& fill);

}  // namespace magic
