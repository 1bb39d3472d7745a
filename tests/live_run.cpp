#include "tests/live_run.h"

#include <filesystem>
#include <regex>

namespace magic::testing {

BackgroundRun::BackgroundRun(const std::string& args, std::string log, const std::string& binary)
    : log_(std::move(log)) {
  std::filesystem::remove(log_);
  thread_ = std::thread([this, args, binary] {
    outcome_ = run_command(binary + " " + args + " > " + log_ + " 2>&1");
    finished_ = true;
  });
}

BackgroundRun::~BackgroundRun() {
  if (thread_.joinable()) thread_.join();
}

int BackgroundRun::port(std::chrono::seconds limit) {
  const std::regex serving(R"(trace: serving http://127\.0\.0\.1:(\d+)/)");
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    std::smatch m;
    const std::string text = std::filesystem::exists(log_) ? read_file(log_) : "";
    if (std::regex_search(text, m, serving)) return std::stoi(m[1]);
    if (finished_) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

CommandOutcome BackgroundRun::join() {
  if (thread_.joinable()) thread_.join();
  outcome_.output = std::filesystem::exists(log_) ? read_file(log_) : outcome_.output;
  return outcome_;
}

WatchedRun watch_run(const std::string& args, const std::string& log, const std::string& binary) {
  BackgroundRun run(args, log, binary);
  WatchedRun watched;
  const int port = run.port();
  if (port > 0) {
    TraceClient client(port);
    watched.seen = read_stream(client);
  } else {
    watched.seen.error = "the run served no tracer port";
  }
  watched.outcome = run.join();
  return watched;
}

}  // namespace magic::testing
