// The tests that talk to the tracer of a real magic-run (or magic-check) start it on a thread of
// its own, its output in a log, where the tracer's port is read.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

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

  // The port the tracer serves on ("trace: serving http://127.0.0.1:P/"); -1 if the run ended or
  // `limit` passed first.
  int port(std::chrono::seconds limit = std::chrono::seconds(60));
  bool finished() const { return finished_; }
  // Waits for the run; its exit code and output.
  CommandOutcome join();

 private:
  std::string log_;
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

}  // namespace magic::testing
