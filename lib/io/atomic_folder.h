// A folder written whole: its files are made in a temporary sibling folder, which is renamed onto
// the destination only once every file is there. A reader (another implementation replaying an
// exported plan) then sees the whole folder or none of it, never a run that stopped half way.
// The destination must be new or an empty directory: rename(2) replaces an empty directory but
// never merges into a full one, and a folder mixing two runs' files would be worse than none.
#pragma once

#include <functional>
#include <string>

namespace magic {

// Checks, before any expensive work, that `path` can become the folder: it does not exist or is
// an empty directory, and it can be created there (output_path.h). InputError naming `flag`.
void require_new_folder(const std::string& path, const std::string& flag);

// Calls `fill` with a fresh temporary directory beside `path`, then renames it onto `path`. If
// `fill` throws, or the rename fails (say `path` filled up meanwhile), the temporary directory is
// removed and `path` is left as it was; the error propagates (InputError for the rename).
void write_folder_atomically(const std::string& path, const std::string& flag,
                             const std::function<void(const std::string& temp_dir)>& fill);

}  // namespace magic
