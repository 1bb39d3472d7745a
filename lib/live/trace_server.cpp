#include "lib/live/trace_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <list>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/live/client_queue.h"
#include "lib/live/trace_log.h"
#include "lib/live/trace_token.h"

namespace magic {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

namespace {

std::string error_message(const std::string& field, const std::string& message) {
  return nlohmann::json({{"type", "error"}, {"field", field}, {"message", message}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"type": "history", "records": N, "seen": M}: the N records that follow are the history.
std::string history_message(size_t records, int64_t seen) {
  return str_cat("{\"type\":\"history\",\"records\":", records, ",\"seen\":", seen, "}");
}

class WebSocketSession;
class HttpSession;

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
int socket_budget(int wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return wanted;
  return static_cast<int>(std::max<rlim_t>(4, std::min<rlim_t>(wanted, limit.rlim_cur / 8)));
}

std::string_view view(beast::string_view v) {
  return {v.data(), v.size()};
}

std::string seconds_text(std::chrono::milliseconds t) {
  return format_number(static_cast<double>(t.count()) / 1000);
}

}  // namespace

class TraceServer::Impl : public std::enable_shared_from_this<TraceServer::Impl> {
 public:
  Impl(TraceServerOptions options, TraceServerHooks hooks)
      : options(std::move(options)),
        hooks(std::move(hooks)),
        acceptor(io),
        accept_retry(io),
        log(this->hooks.log, trace_limits::kLogLinesPerSecond),
        sockets_allowed(socket_budget(this->options.max_sockets)),
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
  void add(const std::shared_ptr<WebSocketSession>& s);
  void remove(const WebSocketSession* s);
  std::vector<std::shared_ptr<WebSocketSession>> sessions_now();
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
  std::list<std::weak_ptr<HttpSession>> waiting;
  // Publishing and a client's joining take turns under this lock, so that a record reaches a new
  // client once: in its history or live. `announcements` counts the messages that are not records.
  std::mutex history_mutex;
  TraceHistory history;
  std::atomic<int64_t> announcements{0};
  std::shared_ptr<const std::string> end_message;  // once published: a client that comes later gets it last

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<WebSocketSession>> sessions_;
};

namespace {

// One WebSocket client: its queue, a write loop that sends one message at a time, and a read loop
// for control messages. Runs on the server's one thread; publish() reaches it through post().
class WebSocketSession : public std::enable_shared_from_this<WebSocketSession> {
 public:
  // Takes one of the server's WebSocket slots (taken by the caller) and gives it back at its end.
  WebSocketSession(tcp::socket socket, std::shared_ptr<TraceServer::Impl> server, std::string peer, SocketSlot slot)
      : ws_(std::move(socket)),
        server_(std::move(server)),
        slot_(std::move(slot)),
        peer_(std::move(peer)),
        queue_(server_->options.queue_bytes),
        allowance_(server_->options.control_messages_per_second),
        refilled_(std::chrono::steady_clock::now()) {}
  ~WebSocketSession() { release_websocket_slot(); }

  void start(http::request<http::string_body> request) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "magic-run tracer"); }));
    ws_.read_message_max(server_->options.max_frame_bytes);
    ws_.async_accept(request, beast::bind_front_handler(&WebSocketSession::on_accept, shared_from_this()));
  }

  // Any thread. Never blocks: a full queue drops the record and counts it.
  void enqueue(std::shared_ptr<const std::string> message, bool record) {
    if (queue_.push(std::move(message), record) == ClientQueue::Push::kOverflow) {
      net::post(ws_.get_executor(), [self = shared_from_this()] {
        self->drop(str_cat("over ", 2 * self->server_->options.queue_bytes, " bytes of messages queued, not taken"));
      });
      return;
    }
    if (!write_posted_.exchange(true)) {
      net::post(ws_.get_executor(), [self = shared_from_this()] {
        self->write_posted_ = false;
        self->write_next();
      });
    }
  }

  int64_t dropped() const { return queue_.dropped_total(); }
  size_t queued_bytes() const { return queue_.bytes(); }
  // Server thread: nothing queued and nothing being written.
  bool drained() const { return closed_ || (!writing_ && queue_.bytes() == 0); }

  void abort() { fail(); }

  void close() {
    if (closed_ || closing_) return;
    closing_ = true;
    ws_.async_close(websocket::close_code::normal, [self = shared_from_this()](beast::error_code) { self->fail(); });
  }

 private:
  void on_accept(beast::error_code ec) {
    if (ec) {
      ++server_->requests_refused;
      return fail();
    }
    ++server_->clients_served;
    ++server_->live_clients;
    accepted_ = true;
    try {
      join();
    } catch (const std::exception& e) {
      return drop(str_cat("its greeting failed: ", e.what()));  // the hook's failure ends this client only
    }
    read_next();
  }

  // The hello, the history (docs/tracer.md, "History"), then the live messages. The hello is made
  // outside the lock (it reads the tracer's state under the tracer's own lock, which publishing
  // holds before this one) and made again if a control was announced meanwhile.
  void join() {
    for (;;) {
      const int64_t announced = server_->announcements;
      auto hello = std::make_shared<const std::string>(server_->hooks.hello());
      std::lock_guard<std::mutex> lock(server_->history_mutex);
      if (server_->announcements != announced) continue;
      enqueue(std::move(hello), false);
      const std::vector<std::shared_ptr<const std::string>> kept = server_->history.messages();
      if (!kept.empty()) {
        enqueue(std::make_shared<const std::string>(history_message(kept.size(), server_->history.seen())), false);
        // Not queued as records: the queue takes the whole history (at most half its capacity).
        for (const auto& m : kept) enqueue(m, false);
      }
      if (server_->end_message) enqueue(server_->end_message, false);
      server_->add(shared_from_this());
      return;
    }
  }

  void write_next() {
    if (writing_ || closed_ || closing_) return;
    std::optional<std::shared_ptr<const std::string>> next = queue_.pop();
    if (!next) return;
    current_ = std::move(*next);
    writing_ = true;
    ws_.text(true);
    ws_.async_write(net::buffer(*current_), beast::bind_front_handler(&WebSocketSession::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, size_t) {
    writing_ = false;
    current_.reset();
    if (ec) return fail();
    write_next();
  }

  void read_next() {
    ws_.async_read(buffer_, beast::bind_front_handler(&WebSocketSession::on_read, shared_from_this()));
  }

  // A frame too big (Beast closes with 1009), a peer that went away, a protocol error, too many
  // control messages: this client ends, the server and the run go on.
  void on_read(beast::error_code ec, size_t) {
    if (ec == websocket::error::message_too_big) {
      return drop(str_cat("a frame over ", server_->options.max_frame_bytes, " bytes"));
    }
    if (ec) return fail();
    if (!allow_message()) {
      return drop(
          str_cat("over ", format_number(server_->options.control_messages_per_second), " control messages a second"));
    }
    std::string text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    ClientReply reply;
    if (!ws_.got_text()) {
      reply.to_sender = error_message("(message)", "expected a JSON text frame, got a binary one");
    } else {
      try {
        reply = server_->hooks.message(text);
      } catch (const std::exception& e) {
        reply.to_sender = error_message("(message)", e.what());
      }
    }
    if (!reply.to_sender.empty()) enqueue(std::make_shared<const std::string>(std::move(reply.to_sender)), false);
    if (!reply.to_all.empty()) server_->broadcast(std::make_shared<const std::string>(std::move(reply.to_all)));
    read_next();
  }

  // A token bucket: a burst of as many messages as the rate allows in a second, then the rate.
  bool allow_message() {
    const double rate = server_->options.control_messages_per_second;
    const auto now = std::chrono::steady_clock::now();
    allowance_ = std::min(rate, allowance_ + rate * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    if (allowance_ < 1) return false;
    allowance_ -= 1;
    return true;
  }

  // Ends a client that broke a bound, saying which in one line.
  void drop(const std::string& reason) {
    if (closed_) return;
    server_->log.line(str_cat("trace: dropped client ", peer_, ": ", reason));
    fail();
  }

  void release_websocket_slot() {
    if (holds_slot_) --server_->websocket_slots;
    holds_slot_ = false;
  }

  void fail() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    slot_.release();
    release_websocket_slot();
    if (accepted_) {
      server_->dropped_by_gone += queue_.dropped_total();
      --server_->live_clients;
      server_->remove(this);
    }
  }

  websocket::stream<beast::tcp_stream> ws_;
  std::shared_ptr<TraceServer::Impl> server_;
  SocketSlot slot_;  // after server_: given back before the server it counts in may go
  std::string peer_;
  ClientQueue queue_;
  beast::flat_buffer buffer_;
  std::shared_ptr<const std::string> current_;
  std::atomic<bool> write_posted_{false};
  bool writing_ = false, closing_ = false, closed_ = false, accepted_ = false, holds_slot_ = true;
  double allowance_;  // control messages this client may send now
  std::chrono::steady_clock::time_point refilled_;
};

// One HTTP request: refused without the token, else a file of the viewer, a 404, or the upgrade
// to a WebSocket on /trace. Until its request is read it is one of the server's waiting
// connections, which the server may close to make room (Impl::admit).
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, std::shared_ptr<TraceServer::Impl> server, std::string peer)
      : stream_(std::move(socket)), server_(std::move(server)), slot_(&server_->open_sockets), peer_(std::move(peer)) {}

  void start() {
    server_->waiting.push_back(weak_from_this());
    waiting_at_ = std::prev(server_->waiting.end());
    waiting_ = true;
    parser_.emplace();
    parser_->header_limit(trace_limits::kMaxRequestBytes);
    parser_->body_limit(trace_limits::kMaxRequestBytes);
    stream_.expires_after(server_->options.request_time);  // a client that never finishes its request
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

  // Closes the connection at the server's close.
  void abort() {
    stop_waiting();
    shut();
  }

  // Closes the connection before its request came, saying why.
  void shed(const std::string& reason) {
    stop_waiting();
    ++server_->connections_shed;
    server_->log.line(str_cat("trace: closed ", peer_, ": ", reason));
    shut();
  }

 private:
  void stop_waiting() {
    if (!waiting_) return;
    waiting_ = false;
    server_->waiting.erase(waiting_at_);
  }

  void on_read(beast::error_code ec, size_t) {
    const bool was_waiting = waiting_;
    stop_waiting();
    if (ec == beast::error::timeout && was_waiting) {
      return shed(str_cat("no whole request within ", seconds_text(server_->options.request_time), " s"));
    }
    if (ec) return shut();
    http::request<http::string_body> request = parser_->release();
    stream_.expires_after(server_->options.request_time);  // for the answer
    const bool upgrade_asked = websocket::is_upgrade(request);
    // The token first: a client without it learns nothing else (not even which paths exist). A
    // WebSocket must carry it itself (URL or header); the cookie is for the viewer's own files.
    const std::string given =
        request_token(view(request.target()), view(request[http::field::authorization]),
                      upgrade_asked ? std::string_view() : view(request[http::field::cookie]), server_->cookie_name);
    const std::string& token = server_->options.token;
    if (!token.empty() && !token_matches(given, token)) {
      ++server_->unauthorized;
      const bool none = given.empty();
      server_->log.line(str_cat("trace: refused ", peer_, ": ", none ? "no token" : "a wrong token", " (HTTP ",
                                none ? 401 : 403, ")"));
      return respond(none ? http::status::unauthorized : http::status::forbidden, "text/plain",
                     none ? "the tracer's token is missing: open the URL the run printed (?token=...)\n"
                          : "the tracer's token is wrong\n",
                     request);
    }
    if (upgrade_asked) return upgrade(std::move(request));
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return respond(http::status::method_not_allowed, "text/plain", "GET only\n", request);
    }
    std::string target(request.target());
    target = target.substr(0, target.find('?'));
    const auto it = server_->options.assets.find(target);
    if (it == server_->options.assets.end())
      return respond(http::status::not_found, "text/plain", "not found\n", request);
    if (!token.empty()) {
      // The page's own files (viewer.js, viewer.css) are fetched by the browser without the URL's
      // token: a cookie of this port only, never sent by another site's page, carries it to them.
      set_cookie_ = str_cat(server_->cookie_name, "=", token, "; Path=/; HttpOnly; SameSite=Strict");
    }
    respond(http::status::ok, it->second.content_type, it->second.body, request);
  }

  void upgrade(http::request<http::string_body> request) {
    std::string target(request.target());
    target = target.substr(0, target.find('?'));
    if (target != "/trace")
      return respond(http::status::not_found, "text/plain", "WebSocket on /trace only\n", request);
    if (!server_->origin_allowed(std::string(request[http::field::origin]))) {
      return respond(http::status::forbidden, "text/plain", "origin not allowed\n", request);
    }
    if (server_->websocket_slots >= server_->options.max_clients) {
      server_->log.line(str_cat("trace: refused ", peer_, ": ", server_->options.max_clients,
                                " WebSocket clients already (HTTP 503)"));
      return respond(http::status::service_unavailable, "text/plain", "too many clients\n", request);
    }
    ++server_->websocket_slots;
    stream_.expires_never();  // the WebSocket keeps its own timeouts
    std::make_shared<WebSocketSession>(stream_.release_socket(), server_, peer_, std::move(slot_))
        ->start(std::move(request));
  }

  void respond(http::status status, const std::string& type, const std::string& body,
               const http::request<http::string_body>& request) {
    if (status != http::status::ok) ++server_->requests_refused;
    auto res = std::make_shared<http::response<http::string_body>>(status, request.version());
    res->set(http::field::server, "magic-run tracer");
    res->set(http::field::content_type, type);
    res->set(http::field::cache_control, "no-store");
    if (!set_cookie_.empty()) res->set(http::field::set_cookie, set_cookie_);
    if (status == http::status::unauthorized) res->set(http::field::www_authenticate, "Bearer");
    res->keep_alive(false);
    if (request.method() != http::verb::head) res->body() = body;
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code, size_t) { self->shut(); });
  }

  void shut() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
    slot_.release();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<TraceServer::Impl> server_;
  SocketSlot slot_;  // after server_: given back before the server it counts in may go
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::list<std::weak_ptr<HttpSession>>::iterator waiting_at_;
  bool waiting_ = false;
  std::string set_cookie_;
};

}  // namespace

namespace {

// Opens, binds and listens on options' address; InputError naming the flag when it cannot.
void open_listening(tcp::acceptor& acceptor, const TraceServerOptions& options) {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.bind, ec);
  if (ec) throw InputError(str_cat("--trace-bind ", options.bind, ": expected an IP address"));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  const auto refuse = [&](const char* what) {
    throw InputError(str_cat("--trace-port ", options.port, ": cannot ", what, " ", options.bind, ":", options.port,
                             ": ", ec.message()));
  };
  acceptor.open(endpoint.protocol(), ec);
  if (ec) refuse("open");
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  acceptor.bind(endpoint, ec);
  if (ec) refuse("bind");
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) refuse("listen on");
}

}  // namespace

bool loopback_address(const std::string& address) {
  beast::error_code ec;
  const net::ip::address a = net::ip::make_address(address, ec);
  return !ec && a.is_loopback();
}

void require_trace_port_free(const std::string& bind, int port) {
  net::io_context io;
  tcp::acceptor acceptor(io);
  TraceServerOptions options;
  options.bind = bind;
  options.port = port;
  open_listening(acceptor, options);
  beast::error_code ignored;
  acceptor.close(ignored);
}

void TraceServer::Impl::listen() {
  open_listening(acceptor, options);
  const int port = acceptor.local_endpoint().port();
  cookie_name = str_cat("magic_trace_", port);
  for (const std::string& host : {std::string("127.0.0.1"), std::string("localhost"), options.bind}) {
    origins.insert(str_cat("http://", host, ":", port));
  }
}

void TraceServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors (the process's or the system's) and the like: try again in a
      // moment rather than spin; the connection waits in the listen queue meanwhile.
      self->log.line(str_cat("trace: cannot accept a connection: ", ec.message()));
      self->accept_retry.expires_after(std::chrono::milliseconds(100));
      self->accept_retry.async_wait([self](beast::error_code e) {
        if (!e) self->accept();
      });
      return;
    }
    self->admit(std::move(socket));
    self->accept();
  });
}

void TraceServer::Impl::admit(tcp::socket socket) {
  beast::error_code ec;
  const tcp::endpoint from = socket.remote_endpoint(ec);
  const std::string peer = ec ? std::string("a client") : str_cat(from.address().to_string(), ":", from.port());
  if (static_cast<int>(waiting.size()) >= options.max_waiting_requests) {
    shed_oldest_waiting();
  }
  // The new socket is open already: counted, it must fit in the budget.
  if (open_sockets + 1 > sockets_allowed && !shed_oldest_waiting()) {
    ++connections_shed;
    log.line(str_cat("trace: closed ", peer, ": the tracer holds ", sockets_allowed,
                     " connections, its budget of file descriptors"));
    socket.close(ec);
    return;
  }
  std::make_shared<HttpSession>(std::move(socket), shared_from_this(), peer)->start();
  sockets_peak = std::max(sockets_peak.load(), open_sockets.load());
}

bool TraceServer::Impl::shed_oldest_waiting() {
  while (!waiting.empty()) {
    const std::shared_ptr<HttpSession> oldest = waiting.front().lock();
    if (!oldest) {
      waiting.pop_front();
      continue;
    }
    oldest->shed(str_cat("it sent no request while ", options.max_waiting_requests,
                         " connections waited for theirs (the oldest makes room)"));
    return true;
  }
  return false;
}

void TraceServer::Impl::fail(const std::string& what) {
  if (failed.exchange(true)) return;
  log.line(str_cat("trace: the tracer's server failed (", what, "); it stops, the run goes on"));
  net::post(io, [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor.close(ignored);
    self->accept_retry.cancel();
  });
}

void TraceServer::Impl::add(const std::shared_ptr<WebSocketSession>& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  sessions_.push_back(s);
}

void TraceServer::Impl::remove(const WebSocketSession* s) {
  std::lock_guard<std::mutex> lock(mutex_);
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [&](const std::weak_ptr<WebSocketSession>& w) {
                                   const auto p = w.lock();
                                   return p == nullptr || p.get() == s;
                                 }),
                  sessions_.end());
}

void TraceServer::Impl::broadcast(const std::shared_ptr<const std::string>& message) {
  std::lock_guard<std::mutex> lock(history_mutex);
  ++announcements;
  for (const auto& s : sessions_now()) s->enqueue(message, false);
}

std::vector<std::shared_ptr<WebSocketSession>> TraceServer::Impl::sessions_now() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<WebSocketSession>> out;
  for (const auto& w : sessions_) {
    if (auto p = w.lock()) out.push_back(std::move(p));
  }
  return out;
}

TraceServer::TraceServer(TraceServerOptions options, TraceServerHooks hooks)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(hooks))) {
  if (impl_->options.token.empty() && !loopback_address(impl_->options.bind)) {
    throw InputError(
        str_cat("--trace-token none: only with a loopback --trace-bind (127.0.0.1, ::1), not ", impl_->options.bind));
  }
  impl_->listen();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_] {
    // A handler that throws ends no more than its own client: the loop goes on serving.
    for (;;) {
      try {
        impl->io.run();
        break;
      } catch (const std::exception& e) {
        impl->log.line(str_cat("trace: a client's handler failed: ", e.what()));
      } catch (...) {
      }
    }
    impl->stopped = true;
  });
}

TraceServer::~TraceServer() {
  close(0);
}

int TraceServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

const std::string& TraceServer::bind_address() const {
  return impl_->options.bind;
}

void TraceServer::publish(const std::shared_ptr<const TraceEvent>& event) {
  if (impl_->failed) return;
  // The run's thread: whatever fails here (memory, a broken executor) ends the tracer, not the run.
  try {
    // The event's text is shared by every client's queue: one copy of the message, not one per client.
    const std::shared_ptr<const std::string> text(event, &event->text);
    std::lock_guard<std::mutex> lock(impl_->history_mutex);
    if (event->record && !event->series.empty()) {
      // A record kept whole holds its tensor too: the history keeps a copy of its text alone.
      impl_->history.add(event->series,
                         event->tensor.defined() ? std::make_shared<const std::string>(event->text) : text);
    }
    if (!event->record) ++impl_->announcements;
    if (event->end) impl_->end_message = text;
    for (const auto& s : impl_->sessions_now()) s->enqueue(text, event->record);
  } catch (const std::exception& e) {
    impl_->fail(e.what());
  }
}

void TraceServer::broadcast(const std::string& text) {
  if (impl_->failed) return;
  try {
    impl_->broadcast(std::make_shared<const std::string>(text));
  } catch (const std::exception& e) {
    impl_->fail(e.what());
  }
}

void TraceServer::close(int grace_ms) {
  if (!impl_->thread.joinable()) return;
  // Let the clients take what is queued (the end message last), then close them. A client that
  // takes nothing for a while (stalled, gone) is not waited for: the run's end never waits on it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  size_t least_queued = SIZE_MAX;
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    std::promise<size_t> queued;
    net::post(impl_->io, [&] {
      size_t bytes = 0;
      for (const auto& s : impl_->sessions_now()) bytes += s->drained() ? 0 : s->queued_bytes() + 1;
      queued.set_value(bytes);
    });
    const size_t now_queued = queued.get_future().get();
    const auto now = std::chrono::steady_clock::now();
    if (now_queued == 0 || now >= deadline) break;
    if (now_queued < least_queued) {
      least_queued = now_queued;
      last_progress = now;
    } else if (now - last_progress > std::chrono::milliseconds(200)) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A client that took everything gets a close handshake; one that did not (stalled, gone) loses
  // its connection at once.
  net::post(impl_->io, [impl = impl_] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    // Connections still waiting for their request end now (a copy: each leaves the list).
    const std::list<std::weak_ptr<HttpSession>> waiting = impl->waiting;
    for (const auto& w : waiting) {
      if (const auto s = w.lock()) s->abort();
    }
    for (const auto& s : impl->sessions_now()) {
      if (s->drained()) {
        s->close();
      } else {
        s->abort();
      }
    }
  });
  const auto wait_until = [](const std::function<bool()>& done, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  wait_until([&] { return impl_->live_clients == 0; }, 300);
  net::post(impl_->io, [impl = impl_] {
    for (const auto& s : impl->sessions_now()) s->abort();
  });
  wait_until([&] { return impl_->stopped.load(); }, 100);
  impl_->io.stop();
  impl_->thread.join();
  // Run what the closed sockets completed, so that their handlers (and the sessions they hold)
  // are released.
  impl_->io.restart();
  impl_->io.poll();
  impl_->log.flush();
}

int TraceServer::clients() const {
  return impl_->live_clients;
}

TraceServerStats TraceServer::stats() const {
  TraceServerStats s;
  s.clients_served = impl_->clients_served;
  s.requests_refused = impl_->requests_refused;
  s.unauthorized = impl_->unauthorized;
  s.connections_shed = impl_->connections_shed;
  s.sockets_allowed = impl_->sockets_allowed;
  s.sockets_peak = impl_->sockets_peak;
  int64_t dropped = impl_->dropped_by_gone;
  for (const auto& session : impl_->sessions_now()) dropped += session->dropped();
  s.records_dropped = dropped;
  std::lock_guard<std::mutex> lock(impl_->history_mutex);
  s.history_records = static_cast<int64_t>(impl_->history.kept());
  s.history_bytes = static_cast<int64_t>(impl_->history.bytes());
  return s;
}

}  // namespace magic
