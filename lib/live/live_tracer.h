// The tracer of one run (docs/tracer.md), as a tool wires it: its options checked before the run
// starts, then the sink with its outputs: the server on rank 0 (--trace-port), the file
// (--trace-file), and on the other ranks of a mesh a forwarder that sends their records to rank 0.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "lib/live/trace_file.h"
#include "lib/live/trace_server.h"
#include "lib/live/tracer_sink.h"

namespace magic {

struct TraceOptions {
  std::optional<int> port;         // --trace-port
  std::string bind = "127.0.0.1";  // --trace-bind
  // --trace-token: unset, one is made per run (trace_token.h); "none": no token, on loopback only.
  std::optional<std::string> token;
  std::string file_dir;      // --trace-file
  std::string points_file;   // --trace-points: the control the run starts with
  std::string vectors_file;  // --trace-vectors: projection's vectors per layer
  double wait_seconds = 0;   // --trace-wait: how long rank 0 waits for a first client

  bool enabled() const { return port.has_value() || !file_dir.empty(); }
};

// What the options name, read and checked (InputError naming the flag): the points file parsed,
// the vectors loaded, the file folder new or empty and writable, the port in range.
struct CheckedTraceOptions {
  TraceOptions options;
  TraceControl control;
  std::shared_ptr<const ProjectionVectors> vectors;
};
CheckedTraceOptions check_trace_options(const TraceOptions& options, bool folder_must_be_new = true);

// Where ranks other than 0 send their records: the run's store (the launcher's or torchrun's),
// so the tracer needs no collective of its own and never joins the run's order of collectives.
struct TraceRelay {
  c10::intrusive_ptr<c10d::Store> store;  // the relay thread's
  c10::intrusive_ptr<c10d::Store> gate;   // the rank's own thread's: --trace-wait holds every rank
  int64_t rank = 0;
  int64_t world = 1;
};

class LiveTracer {
 public:
  // Starts the outputs; `say` (rank 0's stdout) hears where the server listens.
  LiveTracer(const CheckedTraceOptions& options, TraceOrigin origin, std::map<std::string, ViewerAsset> assets,
             std::optional<TraceRelay> relay, std::ostream* say);
  ~LiveTracer();
  LiveTracer(const LiveTracer&) = delete;
  LiveTracer& operator=(const LiveTracer&) = delete;

  TracerSink* sink() { return &sink_; }
  // Rank 0 with a server waits until a client is connected or --trace-wait's seconds pass; the
  // other ranks wait for rank 0, so that no rank's first records go out before the client is there.
  void wait_for_client(std::ostream* say);
  // Publishes the end message ("finished" or "failed"), lets clients take what is queued, closes.
  void finish(const std::string& status);
  int port() const;

  class Relay;

 private:
  TracerSink sink_;
  std::unique_ptr<TraceServer> server_;
  std::unique_ptr<TraceFile> file_;
  std::unique_ptr<Relay> relay_;
  double options_wait_seconds_ = 0;
  c10::intrusive_ptr<c10d::Store> gate_;
  bool finished_ = false;
};

}  // namespace magic
