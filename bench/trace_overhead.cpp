// trace_overhead: what the tensor tracer costs a run (docs/benchmarks.md, "Tracer"). magic-run on
// one config, interleaved case by case, the minimum of several runs each:
//   off          no tracer flag (its trace points are compiled in; with no sink each is a load and
//                a branch: bench/trace_cost)
//   stats        --trace-port, `stats` on every trace point, one client reading everything
//   none         --trace-port, `none` on every trace point (4096 values each), one client
//   stalled      `stats`, one client that connects and never reads (its queue fills, records drop)
//   eight        `stats`, eight clients reading
//   file         --trace-file, `stats` on every trace point
// Wall time of the whole command (start to exit) and its peak memory.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "bench/bench_flags.h"
#include "bench/traced_child.h"

namespace {

using namespace magic;
using namespace magic::bench;

struct Case {
  Case(std::string n, std::vector<std::string> f, int r, int s)
      : name(std::move(n)), flags(std::move(f)), readers(r), stalled(s) {}
  std::string name;
  std::vector<std::string> flags;
  int readers = 0, stalled = 0;
  std::vector<double> wall;
  double peak_mib = 0;
  int64_t records = 0, dropped = 0;
  std::string failure;
};

std::string write_points(const std::string& dir, const std::string& compressor) {
  const std::string path = dir + "/" + compressor + ".json";
  std::ofstream(path) << R"({"points": [{"compressor": ")" << compressor << R"("}]})";
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = parse_flags(
      argc, argv,
      {{"config", std::string(MAGIC_SOURCE_DIR) + "/fixtures/runs/demo.json"}, {"repeats", "3"}, {"steps", ""}},
      "trace_overhead [--config RUN.json] [--repeats N] [--steps N]");
  const int repeats = std::stoi(flags.at("repeats"));
  const std::string dir = std::filesystem::temp_directory_path() / ("trace_overhead." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string stats = write_points(dir, "stats"), none = write_points(dir, "none");
  const std::vector<std::string> port = {"--trace-port", "0", "--trace-wait", "60"};
  const auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  std::vector<Case> cases = {
      {"off", {}, 0, 0},
      {"stats", with(port, {"--trace-points", stats}), 1, 0},
      {"none", with(port, {"--trace-points", none}), 1, 0},
      {"stalled", with(port, {"--trace-points", stats}), 0, 1},
      {"eight", with(port, {"--trace-points", stats}), 8, 0},
      {"file", {"--trace-points", stats, "--trace-file"}, 0, 0},
  };
  std::vector<std::string> base = {MAGIC_RUN_BINARY, "--config", flags.at("config")};
  if (!flags.at("steps").empty()) base = with(base, {"--training.steps", flags.at("steps")});
  for (int r = 0; r < repeats; ++r) {
    for (Case& c : cases) {
      std::vector<std::string> argv_run = with(base, c.flags);
      const std::string file = dir + "/file" + std::to_string(r);
      if (c.name == "file") argv_run.push_back(file);
      const TracedChild t = run_traced_child(argv_run, c.readers, c.stalled);
      std::filesystem::remove_all(file);
      if (t.run.exit_code != 0) c.failure = "exit " + std::to_string(t.run.exit_code) + ": " + t.run.output;
      for (const StreamCheck& s : t.readers) {
        if (!s.error.empty()) c.failure = "a reader: " + s.error;
        c.records = s.records;
        c.dropped = std::max(c.dropped, s.dropped);
      }
      c.wall.push_back(t.run.wall_s);
      c.peak_mib = std::max(c.peak_mib, t.run.peak_rss_mib);
      std::cerr << "  " << c.name << " run " << r + 1 << ": " << std::fixed << std::setprecision(2) << t.run.wall_s
                << " s" << std::endl;
    }
  }
  std::filesystem::remove_all(dir);
  const auto min_of = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  const auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double off = min_of(cases[0].wall);
  std::cout << "trace_overhead: " << flags.at("config")
            << (flags.at("steps").empty() ? "" : ", " + flags.at("steps") + " steps") << ", min and median of "
            << repeats << " interleaved runs each\n"
            << "case       min s   median s   over off   peak MiB   records/client   dropped\n";
  int rc = 0;
  for (const Case& c : cases) {
    std::cout << std::left << std::setw(9) << c.name << std::right << std::fixed << std::setprecision(2) << std::setw(7)
              << min_of(c.wall) << std::setw(11) << median_of(c.wall) << std::setw(10) << std::setprecision(1)
              << 100.0 * (min_of(c.wall) / off - 1.0) << "%" << std::setw(11) << std::setprecision(0) << c.peak_mib
              << std::setw(17) << c.records << std::setw(10) << c.dropped << "\n";
    if (!c.failure.empty()) {
      std::cerr << c.name << ": FAILED: " << c.failure << "\n";
      rc = 1;
    }
  }
  return rc;
}
