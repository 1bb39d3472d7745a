// A folder a run makes for its own files (rank logs, trace records) under TMPDIR, removed with
// everything in it when the object goes, unless kept (a failed run's logs, for the user to read).
#pragma once

#include <string>

namespace magic {

class ScratchFolder {
 public:
  // Makes `<root>/<prefix>-XXXXXX`; an empty root means $TMPDIR, or /tmp. When that fails, path()
  // is empty and error() says where and why.
  explicit ScratchFolder(const std::string& prefix, std::string root = "");
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }
  void keep() { keep_ = true; }

 private:
  std::string path_, error_;
  bool keep_ = false;
};

}  // namespace magic
