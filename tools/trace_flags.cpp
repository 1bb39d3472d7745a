#include "tools/trace_flags.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/launcher.h"

namespace magic {

void add_trace_flags(CLI::App& app, TraceOptions& options) {
  app.add_option("--trace-port", options.port,
                 "serve the tensor tracer's viewer and WebSocket stream on this port of 127.0.0.1 (0: a free "
                 "port; docs/tracer.md)");
  app.add_option("--trace-bind", options.bind, "with --trace-port: listen on this address instead")
      ->capture_default_str();
  app.add_option("--trace-token", options.token,
                 "with --trace-port: the token every request must carry (16 to 256 of A-Z a-z 0-9 _ -; default: "
                 "one made per run and printed in the viewer's URL; none: no token, loopback --trace-bind only)");
  app.add_option("--trace-file", options.file_dir, "write the tracer's records to this new folder (docs/tracer.md)");
  app.add_option("--trace-points", options.points_file,
                 "the tracer's control to start with: a JSON file of rules (docs/tracer.md, \"Messages\")");
  app.add_option("--trace-vectors", options.vectors_file,
                 "a safetensors file of one vector per layer, for the tracer's projection compressor");
  app.add_option("--trace-wait", options.wait_seconds,
                 "with --trace-port: wait up to this many seconds for a first client before the run starts (under "
                 "--topology, less than --timeout)");
}

std::optional<CheckedTraceOptions> checked_trace_flags(const CLI::App& app, const TraceOptions& options,
                                                       std::optional<double> timeout_s) {
  if (app.count("--trace-bind") > 0 && !options.port) throw InputError("--trace-bind: needs --trace-port");
  if (options.token && !options.port) throw InputError("--trace-token: needs --trace-port");
  if (timeout_s && options.wait_seconds >= *timeout_s) {
    throw InputError(str_cat("--trace-wait ", options.wait_seconds,
                             ": under --topology, expected less than --timeout (", *timeout_s,
                             " s): the other ranks wait for rank 0 that long"));
  }
  if (!options.enabled() && options.points_file.empty() && options.vectors_file.empty() && options.wait_seconds == 0) {
    return std::nullopt;
  }
  // A rank finds the folder its rank 0 may have begun writing already: checked once, by the launcher.
  return check_trace_options(options, /*folder_must_be_new=*/!dist::running_as_rank());
}

std::optional<TraceRelay> trace_relay(const dist::Runtime* runtime) {
  if (runtime == nullptr || runtime->world_size() == 1) return std::nullopt;
  return TraceRelay{runtime->store_for_another_thread(), runtime->store_for_another_thread(), runtime->rank(),
                    runtime->world_size()};
}

}  // namespace magic
