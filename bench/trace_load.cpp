// trace_load: the tracer under load on loopback (docs/benchmarks.md, "Tracer"). A 500-step run of
// a small GPT (d_model 16, 2 layers, sequences of 32, batches of 8; REPLAY through all 500 steps)
// with `stats` on every trace point:
//   off        no tracer
//   eight      eight clients, each checking its stream: every record of each rank in order, or a
//              drop notice that accounts for the gap exactly (stream_check.h)
//   + stalled  the same eight and one more client that connects and never reads
//   stalled    eight clients that connect and never read (the slowest clients there are)
// Wall time, peak memory of the run (rank 0: one process), and each client's records and drops.
// The stated bound (trace_limits.h): a client's queue holds at most 2 x kQueueBytes, so the eight
// stalled clients may add at most 8 x 16 MiB to the run's peak without a client; exit 1 past it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "bench/bench_flags.h"
#include "bench/traced_child.h"
#include "lib/live/trace_limits.h"

namespace {

using namespace magic;
using namespace magic::bench;

std::string write_config(const std::string& dir, const std::string& steps) {
  const std::string path = dir + "/load.json";
  std::ofstream(path) << R"({"seed": 0, "dtype": "fp64",
    "model": {"vocab": 257, "d_model": 16, "n_layers": 2, "n_heads": 2, "max_len": 32},
    "data": {"train": ")"
                      << MAGIC_SOURCE_DIR << R"(/fixtures/text/proverbs.jsonl",
             "queries": ")"
                      << MAGIC_SOURCE_DIR << R"(/fixtures/text/queries.jsonl"},
    "training": {"steps": )"
                      << steps << R"(, "batch_size": 8, "checkpoints": "sqrt"},
    "optimizer": {"name": "sgd", "lr": 0.05}})";
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = parse_flags(argc, argv, {{"steps", "500"}, {"clients", "8"}, {"repeats", "2"}},
                                 "trace_load [--steps N] [--clients N] [--repeats N]");
  const int clients = std::stoi(flags.at("clients")), repeats = std::stoi(flags.at("repeats"));
  const std::string dir = std::filesystem::temp_directory_path() / ("trace_load." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = write_config(dir, flags.at("steps"));
  const std::string points = dir + "/stats.json";
  std::ofstream(points) << R"({"points": [{"compressor": "stats"}]})";
  const std::vector<std::string> off = {MAGIC_RUN_BINARY, "--config", config};
  std::vector<std::string> traced = off;
  for (const char* a : {"--trace-port", "0", "--trace-wait", "60", "--trace-points"}) traced.push_back(a);
  traced.push_back(points);
  struct Case {
    Case(std::string n, std::vector<std::string> a, int r, int s)
        : name(std::move(n)), argv(std::move(a)), readers(r), stalled(s) {}
    std::string name;
    std::vector<std::string> argv;
    int readers = 0, stalled = 0;
    double wall = 1e300, peak = 0;
    TracedChild last;
  };
  std::vector<Case> cases = {{"off", off, 0, 0},
                             {std::to_string(clients) + " clients", traced, clients, 0},
                             {std::to_string(clients) + " + stalled", traced, clients, 1},
                             {std::to_string(clients) + " stalled", traced, 0, clients}};
  int rc = 0;
  for (int r = 0; r < repeats; ++r) {
    for (Case& c : cases) {
      c.last = run_traced_child(c.argv, c.readers, c.stalled);
      if (c.last.run.exit_code != 0) {
        std::cerr << c.name << ": magic-run failed:\n" << c.last.run.output;
        rc = 1;
      }
      c.wall = std::min(c.wall, c.last.run.wall_s);
      c.peak = std::max(c.peak, c.last.run.peak_rss_mib);
      std::cerr << "  " << c.name << " run " << r + 1 << ": " << c.last.run.wall_s << " s" << std::endl;
    }
  }
  std::filesystem::remove_all(dir);
  std::cout << "trace_load: " << flags.at("steps") << " steps, `stats` on every trace point, min of " << repeats
            << " interleaved runs\n";
  for (const Case& c : cases) {
    std::cout << std::left << std::setw(18) << c.name << std::right << std::fixed << std::setprecision(2)
              << std::setw(8) << c.wall << " s (" << std::setprecision(1) << std::showpos
              << 100.0 * (c.wall / cases[0].wall - 1.0) << std::noshowpos << "%)   peak " << std::setprecision(0)
              << c.peak << " MiB\n";
    for (size_t i = 0; i < c.last.readers.size(); ++i) {
      const StreamCheck& s = c.last.readers[i];
      std::cout << "    client " << i << ": " << s.records << " records, " << s.dropped << " dropped, end says "
                << s.end_records << (s.error.empty() ? ", in order" : ", ERROR: " + s.error) << "\n";
      if (!s.error.empty() || s.records + s.dropped != s.end_records) rc = 1;
    }
  }
  // Two queue bounds a client: records to kQueueBytes, other messages to twice that (client_queue.h).
  const double bound_mib = cases[0].peak + clients * 2.0 * static_cast<double>(trace_limits::kQueueBytes) / (1 << 20);
  const bool within = cases[3].peak <= bound_mib;
  std::cout << "bound: " << cases[3].name << " peak " << std::setprecision(0) << cases[3].peak << " MiB <= off "
            << cases[0].peak << " MiB + " << clients << " x " << 2 * (trace_limits::kQueueBytes >> 20)
            << " MiB = " << bound_mib << " MiB: " << (within ? "within" : "PAST THE BOUND") << "\n";
  return within ? rc : 1;
}
