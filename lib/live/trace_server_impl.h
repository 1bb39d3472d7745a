// Inside the tracer's server (trace_server.h): what its connections share with it. Included by
// trace_server.cpp and the two kinds of connection only: trace_websocket_session.h (a viewer's
// stream and controls) and trace_http_session.h (a request: the token, the viewer's files, the
// upgrade).
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/core/strings.h"
#include "lib/live/trace_history.h"
#include "lib/live/trace_log.h"
#include "lib/live/trace_server.h"

namespace magic {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

namespace trace_server_detail {

class WebSocketSession;
class HttpSession;

inline std::string error_message(const std::string& field, const std::string& message) {
  return nlohmann::json({{"type", "error"}, {"field", field}, {"message", message}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"type": "history", "records": N, "seen": M}: the N records that follow are the history.
inline std::string history_message(size_t records, int64_t seen) {
  return str_cat("{\"type\":\"history\",\"records\":", records, ",\"seen\":", seen, "}");
}

// One of the server's sockets, counted against its budget of file descriptors from the socket's
// accept to its close.
class SocketSlot {
 public:
  explicit SocketSlot(std::atomic<int>* count) : count_(count) { ++*count_; }
  SocketSlot(SocketSlot&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
  SocketSlot& operator=(SocketSlot&&) = delete;
  ~SocketSlot() { release(); }
  void release() {
    if (count_ != nullptr) --*std::exchange(count_, nullptr);
  }

 private:
  std::atomic<int>* count_;
};

// The budget of sockets: the option, or an eighth of the file descriptors this process may open
// when that is less, so that the run keeps the rest whatever connects.
inline int socket_budget(int wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return wanted;
  return static_cast<int>(std::max<rlim_t>(4, std::min<rlim_t>(wanted, limit.rlim_cur / 8)));
}

inline std::string_view view(beast::string_view v) {
  return {v.data(), v.size()};
}

inline std::string seconds_text(std::chrono::milliseconds t) {
  return format_number(static_cast<double>(t.count()) / 1000);
}

}  // namespace trace_server_detail

class TraceServer::Impl : public std::enable_shared_from_this<TraceServer::Impl> {
 public:
  Impl(TraceServerOptions options, TraceServerHooks hooks)
      : options(std::move(options)),
        hooks(std::move(hooks)),
        acceptor(io),
        accept_retry(io),
        log(this->hooks.log, trace_limits::kLogLinesPerSecond),
        sockets_allowed(trace_server_detail::socket_budget(this->options.max_sockets)),
        history(history_limits(this->options)) {}

  static HistoryLimits history_limits(const TraceServerOptions& o) {
    HistoryLimits limits = o.history;
    limits.bytes = std::min(limits.bytes, o.queue_bytes / 2);
    return limits;
  }

  void listen();
  void accept();
  // A connection just accepted: served, or closed at once when the budget of sockets is spent.
  void admit(tcp::socket socket);
  // Closes the connection that has waited longest for its request; false when none waits.
  bool shed_oldest_waiting();
  // Ends the server after a failure of its own: the run goes on without it.
  void fail(const std::string& what);
  void add(const std::shared_ptr<trace_server_detail::WebSocketSession>& s);
  void remove(const trace_server_detail::WebSocketSession* s);
  std::vector<std::shared_ptr<trace_server_detail::WebSocketSession>> sessions_now();
  // A message that is not a record, to every client.
  void broadcast(const std::shared_ptr<const std::string>& message);
  bool origin_allowed(const std::string& origin) const { return origin.empty() || origins.count(origin) > 0; }

  TraceServerOptions options;
  TraceServerHooks hooks;
  net::io_context io;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  TraceLog log;
  std::thread thread;
  std::set<std::string> origins;
  std::string cookie_name;  // magic_trace_PORT: the viewer's files load with the token the page came with
  std::atomic<int64_t> clients_served{0}, requests_refused{0}, dropped_by_gone{0}, unauthorized{0}, connections_shed{0};
  std::atomic<int> live_clients{0};
  std::atomic<bool> stopped{false}, failed{false};
  // The server's thread only: sockets open, WebSocket slots taken (from the accepted upgrade on,
  // so that a burst of upgrades cannot pass max_clients), connections waiting for their request.
  const int sockets_allowed;
  std::atomic<int> open_sockets{0}, websocket_slots{0}, sockets_peak{0};
  std::list<std::weak_ptr<trace_server_detail::HttpSession>> waiting;
  // Publishing and a client's joining take turns under this lock, so that a record reaches a new
  // client once: in its history or live. `announcements` counts the messages that are not records.
  std::mutex history_mutex;
  TraceHistory history;
  std::atomic<int64_t> announcements{0};
  std::shared_ptr<const std::string> end_message;  // once published: a client that comes later gets it last

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<trace_server_detail::WebSocketSession>> sessions_;
};

}  // namespace magic
