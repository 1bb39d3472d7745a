// A magic-run child with clients of its tracer: readers that check their stream (stream_check.h)
// and stalled clients that connect and never read. The clients start when the run says where it
// serves; the run's wall time and peak memory come from run_child.
#pragma once

#include <memory>
#include <regex>
#include <thread>
#include <vector>

#include "bench/child_run.h"
#include "lib/live/stream_check.h"

namespace magic::bench {

struct TracedChild {
  ChildRun run;
  std::vector<StreamCheck> readers;
};

inline TracedChild run_traced_child(const std::vector<std::string>& argv, int readers, int stalled) {
  TracedChild out;
  out.readers.resize(static_cast<size_t>(readers));
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<TraceClient>> held;  // stalled: connected, never read
  const std::regex serving(R"(trace: serving http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))");
  out.run = run_child(argv, {}, [&](const std::string& line) {
    std::smatch m;
    if (!std::regex_search(line, m, serving)) return;
    const int port = std::stoi(m[1]);
    const std::string token = m[2];
    for (int s = 0; s < stalled; ++s) held.push_back(std::make_unique<TraceClient>(port, "/trace", "", token));
    for (int r = 0; r < readers; ++r) {
      threads.emplace_back([&out, port, token, r] {
        try {
          TraceClient client(port, "/trace", "", token);
          out.readers[static_cast<size_t>(r)] = read_stream(client, std::chrono::seconds(600));
        } catch (const std::exception& e) {
          out.readers[static_cast<size_t>(r)].error = e.what();
        }
      });
    }
  });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace magic::bench
