// Helpers for the tests that talk to the tracer of a real magic-run: the run on a thread of its
// own (its output in a log, where the tracer's port is read), and the stream checks every client
// makes (each rank's records in order, every gap accounted for by a drop notice).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

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

// What one client saw of the stream, checked as it came.
struct StreamCheck {
  std::map<int64_t, int64_t> next_seq;  // by rank: the seq the next record must have
  std::map<std::string, int64_t> by_kind;
  int64_t records = 0, dropped = 0, pending_drops = 0, end_records = -1;
  std::string error;  // the first violation, or ""

  // One message; returns false once the stream ended (the "end" message).
  bool take(const nlohmann::json& m);
};

// Reads `client` until the end message or nothing for `idle`; the check of what came.
StreamCheck read_stream(TraceClient& client, std::chrono::seconds idle = std::chrono::seconds(60));

}  // namespace magic::testing
