#include "lib/live/live_tracer.h"

#include <arpa/inet.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_folder.h"
#include "lib/live/trace_file.h"
#include "lib/live/trace_relay.h"
#include "lib/live/trace_token.h"

namespace magic {

class LiveTracer::Relay {
 public:
  std::unique_ptr<RelaySender> sender;      // ranks other than 0
  std::unique_ptr<RelayReceiver> receiver;  // rank 0 of a mesh with a server
};

CheckedTraceOptions check_trace_options(const TraceOptions& options, bool folder_must_be_new) {
  CheckedTraceOptions checked{options, default_control(), nullptr};
  if (!options.enabled()) {
    for (const auto& [flag, set] : {std::pair<const char*, bool>{"--trace-points", !options.points_file.empty()},
                                    {"--trace-vectors", !options.vectors_file.empty()},
                                    {"--trace-wait", options.wait_seconds != 0}}) {
      if (set) throw InputError(str_cat(flag, ": needs --trace-port or --trace-file"));
    }
  }
  in6_addr any{};
  if (inet_pton(AF_INET, options.bind.c_str(), &any) != 1 && inet_pton(AF_INET6, options.bind.c_str(), &any) != 1) {
    throw InputError(str_cat("--trace-bind ", options.bind, ": expected an IP address"));
  }
  if (options.token && !options.port) throw InputError("--trace-token: needs --trace-port");
  if (options.token == "none" && !loopback_address(options.bind)) {
    throw InputError(
        str_cat("--trace-token none: only with a loopback --trace-bind (127.0.0.1, ::1), not ", options.bind));
  }
  if (options.token && options.token != "none") check_trace_token(*options.token);
  if (options.port && (*options.port < 0 || *options.port > 65535)) {
    throw InputError(str_cat("--trace-port ", *options.port, ": expected a port from 0 to 65535 (0: any free port)"));
  }
  if (!options.points_file.empty()) {
    const nlohmann::json j = read_json_file(options.points_file);
    try {
      checked.control = parse_control(j);
    } catch (const ControlError& e) {
      throw InputError(str_cat("--trace-points ", options.points_file, ": ", e.field(), ": ", e.message()));
    }
  }
  if (!options.vectors_file.empty()) {
    checked.vectors = std::make_shared<const ProjectionVectors>(ProjectionVectors::load(options.vectors_file));
  }
  if (!options.file_dir.empty() && folder_must_be_new) require_new_folder(options.file_dir, "--trace-file");
  if (!(options.wait_seconds >= 0 && options.wait_seconds <= 3600)) {
    throw InputError(str_cat("--trace-wait ", options.wait_seconds, ": expected seconds from 0 to 3600"));
  }
  if (options.wait_seconds > 0 && !options.port) throw InputError("--trace-wait: needs --trace-port");
  return checked;
}

LiveTracer::LiveTracer(const CheckedTraceOptions& checked, TraceOrigin origin,
                       std::map<std::string, ViewerAsset> assets, std::optional<TraceRelay> relay, std::ostream* say)
    : sink_(std::move(origin), checked.control, checked.vectors),
      relay_(std::make_unique<Relay>()),
      options_wait_seconds_(checked.options.wait_seconds) {
  const TraceOptions& o = checked.options;
  const int64_t rank = sink_.origin().rank;
  if (relay) gate_ = relay->gate;
  if (!o.file_dir.empty()) {
    const std::string prefix = relay && relay->world > 1 ? str_cat("rank", rank, ".") : "";
    file_ = std::make_unique<TraceFile>(o.file_dir, prefix);
    sink_.add_output(file_.get());
  }
  if (!o.port) return;
  if (rank != 0) {
    // This rank's records go to rank 0's server; the controls come back from it.
    relay_->sender =
        std::make_unique<RelaySender>(relay->store, rank, [this](TraceControl c) { sink_.set_control(std::move(c)); });
    sink_.add_output(relay_->sender.get());
    return;
  }
  TraceServerOptions so;
  so.bind = o.bind;
  so.port = *o.port;
  so.token = !o.token ? make_trace_token() : *o.token == "none" ? "" : *o.token;
  so.assets = std::move(assets);
  const std::string query = so.token.empty() ? "" : "?token=" + so.token;
  TraceServerHooks hooks;
  hooks.hello = [this] { return sink_.hello().dump(); };
  // The server's thread: one write of the whole line, so that it never splits another.
  hooks.log = [](const std::string& line) { std::cerr << line + "\n" << std::flush; };
  hooks.message = [this](const std::string& text) {
    ClientReply reply;
    try {
      TraceControl control = parse_control_message(text);
      sink_.set_control(control);
      if (relay_->receiver) relay_->receiver->publish_control(control);
      // Through the sink, so the file and every client see the change in order with the records.
      sink_.announce({{"type", "control"}, {"control", control_json(control)}});
    } catch (const ControlError& e) {
      reply.to_sender = nlohmann::json({{"type", "error"}, {"field", e.field()}, {"message", e.message()}})
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return reply;
  };
  server_ = std::make_unique<TraceServer>(std::move(so), std::move(hooks));
  sink_.add_output(server_.get());
  if (relay && relay->world > 1)
    relay_->receiver = std::make_unique<RelayReceiver>(relay->store, relay->world, server_.get());
  if (!loopback_address(o.bind)) {
    std::cerr << "trace: warning: --trace-bind " << o.bind
              << " serves the tracer beyond this machine: whoever sees the token can read the run's stream (its "
                 "training text included) and steer it"
              << std::endl;
  }
  if (say) {
    *say << "trace: serving http://" << o.bind << ":" << server_->port() << "/" << query << " (viewer) and ws://"
         << o.bind << ":" << server_->port() << "/trace" << query << std::endl;
  }
}

LiveTracer::~LiveTracer() {
  try {
    finish("failed");
  } catch (...) {
    // Unwinding from a failed run: the tracer's own end must not hide the run's error.
  }
}

void LiveTracer::wait_for_client(std::ostream* say) {
  const double seconds = options_wait_seconds_;
  if (seconds <= 0) return;
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  const std::string go = "magic-trace/go";
  if (!server_) {
    // Another rank: held until rank 0 has its client (or gave up waiting); never past the limit.
    try {
      if (gate_) gate_->wait({go}, limit + std::chrono::seconds(5));
    } catch (const std::exception&) {
    }
    return;
  }
  if (server_->clients() == 0) {
    if (say) *say << "trace: waiting up to " << seconds << " s for a client before starting" << std::endl;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (server_->clients() == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (say) {
      *say << "trace: " << (server_->clients() > 0 ? "a client is connected" : "no client came; starting") << std::endl;
    }
  }
  try {
    if (gate_) gate_->set(go, std::vector<uint8_t>{'1'});
  } catch (const std::exception&) {
  }
}

int LiveTracer::port() const {
  return server_ ? server_->port() : -1;
}

void LiveTracer::finish(const std::string& status) {
  if (finished_) return;
  finished_ = true;
  if (relay_->sender) relay_->sender->finish();
  if (relay_->receiver) relay_->receiver->finish();
  const bool nothing = sink_.records() == 0;
  sink_.finish(status);
  if (server_) server_->close();
  if (!file_) return;
  file_->close();
  // A run refused before it traced anything leaves no trace folder; a run that failed later
  // keeps what it traced up to its failure (the end line says "failed").
  if (nothing && status != "finished") file_->remove();
}

}  // namespace magic
