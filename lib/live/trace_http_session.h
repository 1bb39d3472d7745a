// One HTTP connection of the tracer's server (trace_server_impl.h), until it is answered or becomes
// a WebSocket client.
#pragma once

#include <optional>

#include "lib/live/trace_token.h"
#include "lib/live/trace_websocket_session.h"

namespace magic::trace_server_detail {

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

}  // namespace magic::trace_server_detail
