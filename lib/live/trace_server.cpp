#include "lib/live/trace_server.h"

#include <future>

#include "lib/core/error.h"
#include "lib/live/trace_http_session.h"

namespace magic {

using namespace trace_server_detail;

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
