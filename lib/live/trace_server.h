// The tracer's server (docs/tracer.md, "The server"): HTTP and WebSocket on one port, on a thread
// of its own (Boost.Beast over Asio). GET serves the viewer's files; /trace upgrades to a
// WebSocket that streams the tracer's messages and takes control messages. Every request must
// carry the run's token (trace_token.h); one that does not is refused before it holds anything.
// Every client has its own bounded queue (client_queue.h) and every other resource a client can
// take is bounded too (trace_limits.h), so no client can block the run, grow its memory or take
// its file descriptors. Nothing a client sends can stop the server: every failure ends that
// client only, and a failure of the server itself ends the tracer, not the run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lib/live/trace_event.h"
#include "lib/live/trace_history.h"
#include "lib/live/trace_limits.h"

namespace magic {

struct ViewerAsset {
  std::string content_type;
  std::string body;
};

struct TraceServerOptions {
  std::string bind = "127.0.0.1";
  int port = 0;  // 0: a free port
  // Every request must carry it (URL parameter token=, or Authorization: Bearer). Empty: none is
  // asked, which only a loopback bind allows (the constructor refuses it on another).
  std::string token;
  size_t queue_bytes = trace_limits::kQueueBytes;
  size_t max_frame_bytes = trace_limits::kMaxFrameBytes;
  int max_clients = trace_limits::kMaxClients;
  int max_sockets = trace_limits::kMaxSockets;
  int max_waiting_requests = trace_limits::kMaxWaitingRequests;
  std::chrono::milliseconds request_time = trace_limits::kRequestTime;
  double control_messages_per_second = trace_limits::kControlMessagesPerSecond;
  // What a client that comes late gets first (trace_history.h); its bytes are held to half a
  // client's queue, so the whole history fits in the queue of the client that comes.
  HistoryLimits history;
  std::map<std::string, ViewerAsset> assets;  // by path: "/", "/viewer.js"
};

// What the server does with a client's text message: a reply to that client, a message to all
// (either may be empty).
struct ClientReply {
  std::string to_sender;
  std::string to_all;
};

struct TraceServerHooks {
  std::function<std::string()> hello;                           // the first message a client gets
  std::function<ClientReply(const std::string& text)> message;  // a text frame from a client
  // One line for each client refused or dropped, with its reason (at most a few a second), and
  // for a failure that ended the server; none when empty.
  std::function<void(const std::string& line)> log;
};

struct TraceServerStats {
  int64_t clients_served = 0;    // WebSocket clients accepted in all
  int64_t records_dropped = 0;   // over every client
  int64_t requests_refused = 0;  // HTTP 401/403/404/405/503 and failed handshakes
  int64_t unauthorized = 0;      // of them, requests without the token (401) or with a wrong one (403)
  int64_t connections_shed = 0;  // closed before their request: over a bound of sockets or too slow
  int64_t sockets_allowed = 0;   // the budget of sockets (file descriptors)
  int64_t sockets_peak = 0;      // the most open at once so far
  int64_t history_records = 0;   // records kept now for a client that comes late
  int64_t history_bytes = 0;
};

class TraceServer : public TraceOutput {
 public:
  // Binds and starts serving; throws InputError naming the address when it cannot bind.
  TraceServer(TraceServerOptions options, TraceServerHooks hooks);
  ~TraceServer() override;
  TraceServer(const TraceServer&) = delete;
  TraceServer& operator=(const TraceServer&) = delete;

  int port() const;
  const std::string& bind_address() const;

  // Sends to every client and keeps the record in the history a client that comes later gets.
  void publish(const std::shared_ptr<const TraceEvent>& event) override;
  // A message for every client that is not a record (a control change).
  void broadcast(const std::string& text);

  // Sends what is queued (the end message last), waits up to `grace_ms` for clients to take it,
  // closes every connection and stops the thread.
  void close(int grace_ms = 2000);

  TraceServerStats stats() const;
  // WebSocket clients connected now.
  int clients() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Whether `address` is a loopback address (127.0.0.0/8, ::1).
bool loopback_address(const std::string& address);

// Throws the InputError TraceServer would where `bind`:`port` cannot be listened on now: a tool
// that starts its server later, in another process (magic-check's rank 0), refuses a port in use
// before its expensive part. Opens no thread, so a launcher can still fork after it.
void require_trace_port_free(const std::string& bind, int port);

}  // namespace magic
