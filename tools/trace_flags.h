// The tracer's flags (docs/tracer.md), one set for the tools that serve it (magic-run and
// magic-check): declared on the command line, then checked with the tool's other flags before
// anything runs.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

#include "lib/distributed/runtime/runtime.h"
#include "lib/live/live_tracer.h"

namespace magic {

// --trace-port, --trace-bind, --trace-token, --trace-file, --trace-points, --trace-vectors, --trace-wait.
void add_trace_flags(CLI::App& app, TraceOptions& options);

// The options checked (check_trace_options; InputError naming the flag), or none when no tracer
// flag was given. `timeout_s`: the collectives' timeout of a distributed run, which --trace-wait
// must stay below (the other ranks wait for rank 0 at their first collective).
std::optional<CheckedTraceOptions> checked_trace_flags(const CLI::App& app, const TraceOptions& options,
                                                       std::optional<double> timeout_s);

// Where ranks other than 0 send their records: the run's store; none for one process.
std::optional<TraceRelay> trace_relay(const dist::Runtime* runtime);

}  // namespace magic
