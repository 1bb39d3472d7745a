#include "lib/io/atomic_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

// ".<name>.partial-<pid>-": the hidden siblings of `target` that process <pid> made.
std::string sibling_prefix(const fs::path& target) {
  return "." + target.filename().string() + ".partial-";
}

// A process killed while it filled a sibling (SIGKILL, a lost machine) could not remove it; the
// next run at the same place does, once that process is gone.
void remove_abandoned_siblings(const fs::path& target) {
  std::error_code ec;
  const std::string prefix = sibling_prefix(target);
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + prefix.size()));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

// A hidden sibling of `target` on the same file system, so that a rename onto it is one step.
fs::path make_sibling(const fs::path& target, const std::string& path, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec)
    throw InputError(
        str_cat(flag, " ", path, ": cannot create ", target.parent_path().string(), " (", ec.message(), ")"));
  remove_abandoned_siblings(target);
  std::string pattern = (target.parent_path() / str_cat(sibling_prefix(target), getpid(), "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw InputError(
        str_cat(flag, " ", path, ": cannot make a temporary folder beside it (", std::strerror(errno), ")"));
  }
  return pattern;
}

}  // namespace

StagedFolder::StagedFolder(const std::string& path, const std::string& flag)
    : target_(destination(path)), path_(path), flag_(flag), dir_(make_sibling(target_, path, flag).string()) {}

StagedFolder::~StagedFolder() {
  std::error_code ec;
  if (!published_) fs::remove_all(dir_, ec);
}

void StagedFolder::publish() {
  give_default_mode(dir_);
  if (::rename(dir_.c_str(), target_.c_str()) != 0) {
    throw InputError(
        str_cat(flag_, " ", path_, ": cannot move the finished folder into place (",
                errno == ENOTEMPTY || errno == EEXIST ? "a file appeared there meanwhile" : std::strerror(errno),
                "); nothing was written there"));
  }
  published_ = true;
}

void StagedFolder::publish_replacing() {
  std::error_code ec;
  if (!fs::is_directory(target_, ec)) return publish();
  give_default_mode(dir_);
  // RENAME_EXCHANGE swaps the two names in one step: dir_ then holds the old run's files, which
  // the destructor removes.
  if (::renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    throw InputError(str_cat(flag_, " ", path_, ": cannot move the finished folder into place (", std::strerror(errno),
                             "); the folder is as it was"));
  }
}

std::string naming_destination(std::string message, const std::string& dir, const std::string& path) {
  for (size_t at = 0; (at = message.find(dir, at)) != std::string::npos; at += path.size())
    message.replace(at, dir.size(), path);
  return message;
}

namespace {

// `fill` in the staged folder; a refusal (a full disk, say) names `path`, then `note`.
void fill_naming_destination(const StagedFolder& staged, const std::string& path,
                             const std::function<void(const std::string&)>& fill, const std::string& note) {
  try {
    fill(staged.dir());
  } catch (const InputError& e) {
    throw InputError(naming_destination(e.what(), staged.dir(), path) + note);
  }
}

}  // namespace

void require_new_folder(const std::string& path, const std::string& flag) {
  if (path.empty()) throw InputError(flag + ": expected a directory name");
  refuse_a_full_folder(destination(path), path, flag);
  require_writable_directory(path, flag);
}

void write_folder_atomically(const std::string& path, const std::string& flag,
                             const std::function<void(const std::string& temp_dir)>& fill) {
  refuse_a_full_folder(destination(path), path, flag);
  StagedFolder staged(path, flag);
  fill_naming_destination(staged, path, fill, "");
  staged.publish();
}

void require_replaceable_folder(const std::string& path, const std::string& flag,
                                const std::vector<std::string>& ours) {
  if (path.empty()) throw InputError(flag + ": expected a directory name");
  const fs::path target = destination(path);
  std::error_code ec;
  if (fs::is_directory(target, ec)) {
    for (const auto& entry : fs::directory_iterator(target, ec)) {
      const std::string name = entry.path().filename().string();
      if (std::find(ours.begin(), ours.end(), name) == ours.end() || !entry.is_regular_file(ec)) {
        throw InputError(str_cat(flag, " ", path, ": holds '", name,
                                 "', which a run does not write; name a new folder, an empty one or one a run "
                                 "wrote (the folder is replaced as a whole)"));
      }
    }
  }
  require_writable_directory(path, flag);
}

void replace_folder_atomically(const std::string& path, const std::string& flag, const std::vector<std::string>& ours,
                               const std::function<void(const std::string& temp_dir)>& fill) {
  require_replaceable_folder(path, flag, ours);
  StagedFolder staged(path, flag);
  fill_naming_destination(staged, path, fill, "; " + path + " holds the last run's files as they were");
  staged.publish_replacing();
}

}  // namespace magic
