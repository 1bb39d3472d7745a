#include "lib/core/scratch_folder.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace magic {

ScratchFolder::ScratchFolder(const std::string& prefix, std::string root) {
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    root = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string pattern = root + "/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    error_ = "cannot create a folder in " + root + ": " + std::strerror(errno);
    return;
  }
  path_ = pattern;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ec;
  if (!path_.empty() && !keep_) std::filesystem::remove_all(path_, ec);
}

}  // namespace magic
