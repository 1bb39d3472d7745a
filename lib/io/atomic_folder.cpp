#include "lib/io/atomic_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/output_path.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

// `path` absolute, without a trailing separator (so that its parent is the folder it lives in).
fs::path destination(const std::string& path) {
  fs::path p = fs::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p;
}

void refuse_a_full_folder(const fs::path& p, const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (fs::is_directory(p, ec) && !fs::is_empty(p, ec)) {
    throw InputError(str_cat(flag, " ", path,
                             ": exists and is not empty; name a new or empty directory (nothing is written into a "
                             "folder that holds other files)"));
  }
}

// mkdtemp makes 0700; the folder a user asked for gets the mode a plain mkdir would give it.
void give_default_mode(const fs::path& dir) {
  const mode_t mask = umask(0);
  umask(mask);
  chmod(dir.c_str(), 0777 & ~mask);
}

}  // namespace

void require_new_folder(const std::string& path, const std::string& flag) {
  if (path.empty()) throw InputError(flag + ": expected a directory name");
  refuse_a_full_folder(destination(path), path, flag);
  require_writable_directory(path, flag);
}

void write_folder_atomically(const std::string& path, const std::string& flag,
                             const std::function<void(const std::string& temp_dir)>& fill) {
  const fs::path target = destination(path);
  refuse_a_full_folder(target, path, flag);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec)
    throw InputError(
        str_cat(flag, " ", path, ": cannot create ", target.parent_path().string(), " (", ec.message(), ")"));
  // A hidden sibling on the same file system, so that the rename is one atomic step.
  std::string pattern = (target.parent_path() / ("." + target.filename().string() + ".partial-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw InputError(
        str_cat(flag, " ", path, ": cannot make a temporary folder beside it (", std::strerror(errno), ")"));
  }
  const fs::path temp = pattern;
  try {
    fill(temp.string());
    give_default_mode(temp);
    fs::rename(temp, target, ec);
    if (ec) {
      throw InputError(str_cat(flag, " ", path, ": cannot move the finished folder into place (", ec.message(),
                               "); nothing was written there"));
    }
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

}  // namespace magic
