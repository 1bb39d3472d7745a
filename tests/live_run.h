// The tests that talk to the tracer of a real magic-run start it on a thread of its own, its
// output in a log, where the tracer's port is read.
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
  // Starts `MAGIC_RUN_BINARY args`, its stdout and stderr into `log`.
  BackgroundRun(const std::string& args, std::string log);
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

}  // namespace magic::testing
