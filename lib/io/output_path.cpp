#include "lib/io/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

bool writable(const fs::path& dir) {
  return access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
}

std::string shown(const fs::path& dir) {
  return dir.empty() ? "." : dir.string();
}

// access() says yes to root everywhere, /proc and read-only mounts included: only making a
// directory there and removing it again tells. Empty when it worked, else the system's reason.
std::string probe_directory(const fs::path& dir) {
  std::string pattern = (dir.empty() ? fs::path(".") : dir) / ".magic-probe-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return std::strerror(errno);
  rmdir(pattern.c_str());
  return "";
}

}  // namespace

void require_writable_file(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  if (fs::is_directory(path)) throw InputError(str_cat(flag, " ", path, ": is a directory; expected a file name"));
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent)) {
    throw InputError(str_cat(flag, " ", path, ": directory ", parent.string(), " does not exist"));
  }
  if (!writable(parent)) throw InputError(str_cat(flag, " ", path, ": directory ", shown(parent), " is not writable"));
  if (const std::string why = probe_directory(parent); !why.empty()) {
    throw InputError(str_cat(flag, " ", path, ": cannot write in ", shown(parent), " (", why, ")"));
  }
}

void require_writable_directory(const std::string& path, const std::string& flag) {
  fs::path p = fs::absolute(path);
  if (fs::exists(p)) {
    if (!fs::is_directory(p)) throw InputError(str_cat(flag, " ", path, ": is a file; expected a directory"));
    if (!writable(p)) throw InputError(str_cat(flag, " ", path, ": directory is not writable"));
    if (const std::string why = probe_directory(p); !why.empty()) {
      throw InputError(str_cat(flag, " ", path, ": cannot write in it (", why, ")"));
    }
    return;
  }
  while (!p.empty() && !fs::exists(p)) p = p.parent_path();
  if (!fs::is_directory(p)) {
    throw InputError(str_cat(flag, " ", path, ": ", p.string(), " is a file; cannot create a directory under it"));
  }
  if (!writable(p)) throw InputError(str_cat(flag, " ", path, ": cannot create it, ", p.string(), " is not writable"));
  if (const std::string why = probe_directory(p); !why.empty()) {
    throw InputError(str_cat(flag, " ", path, ": cannot create it in ", p.string(), " (", why, ")"));
  }
}

}  // namespace magic
