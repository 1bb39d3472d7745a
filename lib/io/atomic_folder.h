// A folder written whole: its files are made in a temporary sibling folder, which is renamed onto
// the destination only once every file is there. A reader (another implementation replaying an
// exported plan) then sees the whole folder or none of it, never a run that stopped half way.
// The destination must be new or an empty directory: rename(2) replaces an empty directory but
// never merges into a full one, and a folder mixing two runs' files would be worse than none.
// A sibling left by a process that was killed while filling it is removed by the next write at the
// same place, once no process of that pid is alive on this machine.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace magic {

// Checks, before any expensive work, that `path` can become the folder: it does not exist or is
// an empty directory, and it can be created there (output_path.h). InputError naming `flag`.
void require_new_folder(const std::string& path, const std::string& flag);

// Calls `fill` with a fresh temporary directory beside `path`, then renames it onto `path`. If
// `fill` throws, or the rename fails (say `path` filled up meanwhile), the temporary directory is
// removed and `path` is left as it was; the error propagates (InputError for the rename).
void write_folder_atomically(const std::string& path, const std::string& flag,
                             const std::function<void(const std::string& temp_dir)>& fill);

// A folder a tool writes again on each run (magic-run's --out): it may exist already, holding only
// files named in `ours` (the last run's), or nothing. Checked before any expensive work, InputError
// naming `flag` and the first file that is not ours: replacing the folder removes what it holds.
void require_replaceable_folder(const std::string& path, const std::string& flag, const std::vector<std::string>& ours);

// `fill` writes the new run's files into a temporary sibling folder, which then takes `path`'s
// place in one step (renameat2's RENAME_EXCHANGE where a folder is there already; the old folder
// is removed after). A reader sees the old run's files together or the new run's, never a mix,
// and a run that fails part way (a full disk, a kill) leaves the old folder as it was.
void replace_folder_atomically(const std::string& path, const std::string& flag, const std::vector<std::string>& ours,
                               const std::function<void(const std::string& temp_dir)>& fill);

}  // namespace magic
