// LibTorch logs through glog (Debian's build) or c10's own logger, straight to stderr: connecting
// to an unreachable rendezvous store prints "WARNING: Logging before InitGoogleLogging()" and a
// timestamped line from socket.cpp per retry before our own one-line message says the same.
// Where our message covers what the library would say, its log is held back for the scope.
#pragma once

namespace magic {

// Below FATAL, nothing LibTorch logs reaches stderr while this lives; the level found is restored.
class LibraryLogSilenced {
 public:
  LibraryLogSilenced();
  ~LibraryLogSilenced();
  LibraryLogSilenced(const LibraryLogSilenced&) = delete;
  LibraryLogSilenced& operator=(const LibraryLogSilenced&) = delete;

 private:
  int saved_;
};

}  // namespace magic
