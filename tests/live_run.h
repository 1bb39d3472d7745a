// The tests that talk to the tracer of a real magic-run (or magic-check) start it on a thread of
// its own, its output in a log, where the tracer's port is read.
#pragma once

#include <sys/resource.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lib/live/stream_check.h"
#include "lib/live/trace_client.h"
#include "tests/support.h"

namespace magic::testing {

class BackgroundRun {
 public:
  // Starts `binary args`, its stdout and stderr into `log`.
  BackgroundRun(const std::string& args, std::string log, const std::string& binary = MAGIC_RUN_BINARY);
  ~BackgroundRun();
  BackgroundRun(const BackgroundRun&) = delete;
  BackgroundRun& operator=(const BackgroundRun&) = delete;

  // The port the tracer serves on ("trace: serving http://127.0.0.1:P/?token=T"); -1 if the run
  // ended or `limit` passed first.
  int port(std::chrono::seconds limit = std::chrono::seconds(60));
  // The token of that line (empty under --trace-token none), once port() found it.
  const std::string& token() const { return token_; }
  bool finished() const { return finished_; }
  // Waits for the run; its exit code and output.
  CommandOutcome join();

 private:
  std::string log_;
  std::string token_;
  CommandOutcome outcome_{-1, ""};
  std::thread thread_;
  std::atomic<bool> finished_{false};
};

// One client's view of a whole run: `binary args` started in the background, one client connected
// as soon as the tracer serves, the stream read to its end, the run waited for. `seen.error` says
// when no port was served.
struct WatchedRun {
  StreamCheck seen;
  CommandOutcome outcome{-1, ""};
};
WatchedRun watch_run(const std::string& args, const std::string& log, const std::string& binary = MAGIC_RUN_BINARY);

// What reaches the tracer's port without its token (issue 46): `count` plain TCP connections to
// 127.0.0.1:port, opened at once and held; the even ones send nothing, the odd ones a WebSocket
// upgrade without the token. Empty when one could not be opened.
std::vector<int> open_tokenless_flood(int port, int count);
// A plain TCP connection to 127.0.0.1:port that sends `bytes` and is then held; -1 on failure.
int open_held(int port, const std::string& bytes);
// What the server did with a held connection so far: answered it (the answer's first line,
// "HTTP/1.1 401 Unauthorized"), closed it unanswered ("closed"), or nothing yet ("open").
std::string connection_fate(int fd);
// The fates of `fds`, counted.
std::map<std::string, int> connection_fates(const std::vector<int>& fds);
void close_all(const std::vector<int>& fds);
// Raises this process's soft RLIMIT_NOFILE to `needed` if it is lower; false when it cannot.
bool allow_descriptors(rlim_t needed);

}  // namespace magic::testing
