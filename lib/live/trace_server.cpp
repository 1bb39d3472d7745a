#include "lib/live/trace_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/live/client_queue.h"

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

}  // namespace

class TraceServer::Impl : public std::enable_shared_from_this<TraceServer::Impl> {
 public:
  Impl(TraceServerOptions options, TraceServerHooks hooks)
      : options(std::move(options)), hooks(std::move(hooks)), acceptor(io), history(history_limits(this->options)) {}

  static HistoryLimits history_limits(const TraceServerOptions& o) {
    HistoryLimits limits = o.history;
    limits.bytes = std::min(limits.bytes, o.queue_bytes / 2);
    return limits;
  }

  void listen();
  void accept();
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
  std::thread thread;
  std::set<std::string> origins;
  std::atomic<int64_t> clients_served{0}, requests_refused{0}, dropped_by_gone{0};
  std::atomic<int> live_clients{0};
  std::atomic<bool> stopped{false};
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
  WebSocketSession(tcp::socket socket, std::shared_ptr<TraceServer::Impl> server)
      : ws_(std::move(socket)), server_(std::move(server)), queue_(server_->options.queue_bytes) {}

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
      net::post(ws_.get_executor(), [self = shared_from_this()] { self->fail(); });
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
      return;
    }
    ++server_->clients_served;
    ++server_->live_clients;
    accepted_ = true;
    join();
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

  // A frame too big (Beast closes with 1009), a peer that went away, a protocol error: this
  // client ends, the server and the run go on.
  void on_read(beast::error_code ec, size_t) {
    if (ec) return fail();
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

  void fail() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    if (accepted_) {
      server_->dropped_by_gone += queue_.dropped_total();
      --server_->live_clients;
      server_->remove(this);
    }
  }

  websocket::stream<beast::tcp_stream> ws_;
  std::shared_ptr<TraceServer::Impl> server_;
  ClientQueue queue_;
  beast::flat_buffer buffer_;
  std::shared_ptr<const std::string> current_;
  std::atomic<bool> write_posted_{false};
  bool writing_ = false, closing_ = false, closed_ = false, accepted_ = false;
};

// One HTTP request: a file of the viewer, a 404, or the upgrade to a WebSocket on /trace.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, std::shared_ptr<TraceServer::Impl> server)
      : stream_(std::move(socket)), server_(std::move(server)) {}

  void start() {
    parser_.emplace();
    parser_->header_limit(16 * 1024);
    parser_->body_limit(16 * 1024);
    stream_.expires_after(std::chrono::seconds(10));  // a client that never finishes its request
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

 private:
  void on_read(beast::error_code ec, size_t) {
    if (ec) return shut();
    http::request<http::string_body> request = parser_->release();
    if (websocket::is_upgrade(request)) return upgrade(std::move(request));
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return respond(http::status::method_not_allowed, "text/plain", "GET only\n", request);
    }
    std::string target(request.target());
    target = target.substr(0, target.find('?'));
    const auto it = server_->options.assets.find(target);
    if (it == server_->options.assets.end())
      return respond(http::status::not_found, "text/plain", "not found\n", request);
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
    if (server_->live_clients >= server_->options.max_clients) {
      return respond(http::status::service_unavailable, "text/plain", "too many clients\n", request);
    }
    stream_.expires_never();  // the WebSocket keeps its own timeouts
    std::make_shared<WebSocketSession>(stream_.release_socket(), server_)->start(std::move(request));
  }

  void respond(http::status status, const std::string& type, const std::string& body,
               const http::request<http::string_body>& request) {
    if (status != http::status::ok) ++server_->requests_refused;
    auto res = std::make_shared<http::response<http::string_body>>(status, request.version());
    res->set(http::field::server, "magic-run tracer");
    res->set(http::field::content_type, type);
    res->set(http::field::cache_control, "no-store");
    res->keep_alive(false);
    if (request.method() != http::verb::head) res->body() = body;
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code, size_t) { self->shut(); });
  }

  void shut() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  std::shared_ptr<TraceServer::Impl> server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
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
  for (const std::string& host : {std::string("127.0.0.1"), std::string("localhost"), options.bind}) {
    origins.insert(str_cat("http://", host, ":", port));
  }
}

void TraceServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!ec) std::make_shared<HttpSession>(std::move(socket), self)->start();
    self->accept();
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
  impl_->listen();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_] {
    // A handler that throws ends no more than its own client: the loop goes on serving.
    for (;;) {
      try {
        impl->io.run();
        break;
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
}

void TraceServer::broadcast(const std::string& text) {
  impl_->broadcast(std::make_shared<const std::string>(text));
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
}

int TraceServer::clients() const {
  return impl_->live_clients;
}

TraceServerStats TraceServer::stats() const {
  TraceServerStats s;
  s.clients_served = impl_->clients_served;
  s.requests_refused = impl_->requests_refused;
  int64_t dropped = impl_->dropped_by_gone;
  for (const auto& session : impl_->sessions_now()) dropped += session->dropped();
  s.records_dropped = dropped;
  std::lock_guard<std::mutex> lock(impl_->history_mutex);
  s.history_records = static_cast<int64_t>(impl_->history.kept());
  s.history_bytes = static_cast<int64_t>(impl_->history.bytes());
  return s;
}

}  // namespace magic
