#include "lib/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/fnv1a.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"

namespace magic {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFolderPrefix = "magic-run-";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kLock = "lock";

}  // namespace

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str_cat(path, ": cannot read it"));
  uint64_t h = kFnvBasis, size = 0;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<size_t>(in.gcount());
    h = fnv1a(h, buffer.data(), n);
    size += n;
  }
  return str_cat(size, " bytes, FNV-1a ", hex16(h));
}

namespace {

int64_t folder_bytes(const fs::path& folder) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(folder, ec)) {
    if (e.is_regular_file(ec)) bytes += static_cast<int64_t>(e.file_size(ec));
  }
  return bytes;
}

// Takes the folder's lock without waiting; -1 when another process holds it.
int try_lock(const fs::path& folder) {
  const std::string path = (folder / kLock).string();
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(str_cat("training.spill_dir: cannot create ", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string pid = str_cat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for messages; the lock itself is what counts.
  }
  return fd;
}

std::string lock_holder(const fs::path& folder) {
  std::ifstream in(folder / kLock);
  std::string pid;
  std::getline(in, pid);
  return pid.empty() ? std::string("another process") : "pid " + pid;
}

bool lock_is_free(const fs::path& folder) {
  const std::string path = (folder / kLock).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

// Other runs' folders nobody holds: left by interrupted runs of other configs.
void note_other_folders(const fs::path& spill_dir, const fs::path& ours, std::ostream& notes) {
  int64_t count = 0, bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(spill_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory(ec) || name.rfind(kFolderPrefix, 0) != 0 || e.path() == ours) continue;
    if (!lock_is_free(e.path())) continue;
    ++count;
    bytes += folder_bytes(e.path());
  }
  if (count == 0) return;
  notes << "magic-run: note: " << spill_dir.string() << " also holds " << count << " folder" << (count > 1 ? "s" : "")
        << " of interrupted runs of other configs (" << format_fixed(bytes / 1048576.0, 1) << " MiB, " << kFolderPrefix
        << "*); remove them if those runs are abandoned\n";
}

// Each line of an identity by its key ("train data", "model.path DIR/x", "config", "layout").
std::map<std::string, std::string> identity_lines(const std::string& text) {
  std::map<std::string, std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    const bool config = line.rfind("config ", 0) == 0;
    if (config) lines["config"] = line.substr(7);
    if (!config && colon != std::string::npos) lines[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return lines;
}

// Where an interrupted run left in spill_dir differs from this one only in what it read (its
// inputs, or its config), what changed: "; FOLDER ran on other inputs: train data was ..., now ...".
std::string changed_inputs(const std::string& spill_dir, const RunIdentity& identity) {
  const auto ours = identity_lines(identity.text);
  std::string best;
  size_t fewest = std::numeric_limits<size_t>::max();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(spill_dir, ec)) {
    const fs::path manifest = e.path() / kManifest;
    if (e.path().filename().string().rfind(kFolderPrefix, 0) != 0 || !fs::is_regular_file(manifest, ec)) continue;
    nlohmann::json m;
    try {
      m = read_json_file(manifest.string());
    } catch (const InputError&) {
      continue;  // a damaged manifest belongs to another run; acquire() names it when that run is resumed
    }
    if (!m.contains("identity") || !m["identity"].is_string()) continue;
    const auto theirs = identity_lines(m["identity"].get<std::string>());
    if (theirs.count("layout") == 0 || theirs.at("layout") != ours.at("layout")) continue;
    std::vector<std::string> changes;
    for (const auto& [key, value] : ours) {
      auto it = theirs.find(key);
      if (key == "config" && (it == theirs.end() || it->second != value)) {
        changes.push_back("the config (or an override) differs");
      } else if (it == theirs.end()) {
        changes.push_back(str_cat(key, " is new"));
      } else if (it->second != value) {
        changes.push_back(str_cat(key, " was ", it->second, ", now ", value));
      }
    }
    for (const auto& [key, value] : theirs) {
      if (ours.count(key) == 0) changes.push_back(str_cat(key, " is gone"));
    }
    if (!changes.empty() && changes.size() < fewest) {
      fewest = changes.size();
      best = str_cat("; the interrupted run in ", e.path().string(), " read other inputs: ", join(changes, "; "));
    }
  }
  return best;
}

// A write killed part way leaves its temporary file (atomic_file.h: "<name>.partial.<pid>"). No run
// reads one, but it would count as work and stay in the folder for good; whoever holds the lock
// (every rank that wrote there has ended) removes them.
void remove_partial_files(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::path> partial;
  for (const auto& e : fs::recursive_directory_iterator(folder, ec)) {
    if (e.path().filename().string().find(".partial.") != std::string::npos) partial.push_back(e.path());
  }
  for (const auto& p : partial) fs::remove(p, ec);
}

void remove_contents_except_lock(const fs::path& folder) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().filename() != kLock) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

RunIdentity run_identity(const RunConfig& config, const std::string& config_path, const std::string& layout,
                         bool per_query) {
  RunIdentity id;
  const nlohmann::json json = config.resolved.is_null() ? read_config_file(config_path) : config.resolved;
  id.text = str_cat("magic-run checkpoints, format 2\nconfig ", json.dump());
  for (const auto& input : input_files(config)) {
    id.text += str_cat("\n", input.role, input.role == "model.path" ? " " + input.path : "", ": ",
                       file_fingerprint(input.path));
  }
  id.text += str_cat("\nlayout: ", layout, "\nREPLAY: ", per_query ? "per query, in one pass" : "the query set", "\n");
  id.hash = fnv1a(kFnvBasis, id.text.data(), id.text.size());
  return id;
}

std::string run_folder_path(const std::string& spill_dir, const RunIdentity& identity) {
  return (fs::path(spill_dir) / (kFolderPrefix + hex16(identity.hash))).string();
}

std::string rank_folder_path(const std::string& run_folder, int rank) {
  return (fs::path(run_folder) / str_cat("rank-", rank)).string();
}

void require_spill_dir(const RunConfig& config, const std::string& flag) {
  if (!config.spill_dir) {
    throw InputError(str_cat(flag, ": ", config.source,
                             " has no training.spill_dir; checkpoints held in memory do not outlive the run (set "
                             "spill_dir to make the run resumable)"));
  }
}

RunFolderLease RunFolderLease::acquire(const std::string& spill_dir, const RunIdentity& identity, ResumeMode mode,
                                       std::ostream* notes) {
  const fs::path folder = run_folder_path(spill_dir, identity);
  const fs::path manifest = folder / kManifest;
  std::error_code ec;
  const bool existed = fs::is_regular_file(manifest, ec);
  if (mode == ResumeMode::kResume && !existed) {
    throw InputError(str_cat("--resume: no interrupted run of this config and layout in ", spill_dir, " (looked for ",
                             folder.string(), ")", changed_inputs(spill_dir, identity),
                             "; without --resume the run starts from the beginning"));
  }
  fs::create_directories(folder, ec);
  if (!fs::is_directory(folder)) {
    throw InputError(str_cat("training.spill_dir ", spill_dir, ": cannot create ", folder.string()));
  }
  const int fd = try_lock(folder);
  if (fd < 0) {
    throw InputError(str_cat(folder.string(), " is in use by a running magic-run (", lock_holder(folder),
                             ") of the same config and layout; wait for it or stop it"));
  }
  RunFolderLease lease(folder.string(), fd, false);
  if (mode == ResumeMode::kFresh && existed) {
    lease.path_.clear();  // not ours to remove
    throw InputError(str_cat(folder.string(), " holds the checkpoints of an earlier run of this config and layout (",
                             format_fixed(folder_bytes(folder) / 1048576.0, 1),
                             " MiB): pass --resume to continue it, or --restart to discard it and begin again"));
  }
  if (mode == ResumeMode::kResume) {
    const nlohmann::json m = read_json_file(manifest.string());
    if (!m.contains("identity") || m["identity"] != identity.text) {
      lease.path_.clear();
      throw InputError(str_cat("--resume: ", manifest.string(),
                               " describes a different run (its identity differs from this config's); pass "
                               "--restart to discard it"));
    }
    remove_partial_files(folder);
    lease.resumed_ = true;
  } else {
    if (existed) remove_contents_except_lock(folder);
    nlohmann::json m;
    m["identity"] = identity.text;
    try {
      write_file_atomically(manifest.string(), m.dump(2) + "\n");
    } catch (const InputError&) {
      lease.remove();  // a folder without its manifest is no run's: a full disk leaves nothing behind
      throw;
    }
  }
  if (notes) note_other_folders(spill_dir, folder, *notes);
  return lease;
}

RunFolderLease::RunFolderLease(RunFolderLease&& other) noexcept
    : path_(std::move(other.path_)), lock_fd_(other.lock_fd_), resumed_(other.resumed_) {
  other.path_.clear();
  other.lock_fd_ = -1;
}

RunFolderLease& RunFolderLease::operator=(RunFolderLease&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    path_ = std::move(other.path_);
    lock_fd_ = other.lock_fd_;
    resumed_ = other.resumed_;
    other.path_.clear();
    other.lock_fd_ = -1;
  }
  return *this;
}

RunFolderLease::~RunFolderLease() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunFolderLease::remove() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  path_.clear();
}

bool RunFolderLease::holds_work() const {
  if (path_.empty()) return false;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(path_, ec)) {
    if (e.is_regular_file(ec) && e.path().parent_path() != fs::path(path_)) return true;
  }
  return false;
}

void settle_run_folder(RunFolderLease& lease, RunOutcome outcome, bool keep, std::ostream& out) {
  if (lease.path().empty()) return;
  if (outcome == RunOutcome::kInterrupted) remove_partial_files(lease.path());
  if (outcome == RunOutcome::kInterrupted && lease.holds_work()) {
    out << "magic-run: checkpoints kept in " << lease.path()
        << ": run the same command with --resume to continue from them\n";
  } else if (keep) {
    out << "magic-run: checkpoints kept in " << lease.path() << " (--keep-checkpoints)\n";
  } else {
    lease.remove();
  }
}

}  // namespace magic
