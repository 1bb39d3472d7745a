// One WebSocket client of the tracer's server (trace_server_impl.h).
#pragma once

#include <optional>

#include "lib/live/client_queue.h"
#include "lib/live/trace_server_impl.h"

namespace magic::trace_server_detail {

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
      // Counted once subscribed, not once accepted: --trace-wait starts the run on this count,
      // and a record published between the two would reach the first client only as history.
      ++server_->live_clients;
      joined_ = true;
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
      server_->remove(this);
    }
    if (joined_) {
      joined_ = false;
      --server_->live_clients;
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
  bool writing_ = false, closing_ = false, closed_ = false, accepted_ = false, joined_ = false, holds_slot_ = true;
  double allowance_;  // control messages this client may send now
  std::chrono::steady_clock::time_point refilled_;
};

}  // namespace magic::trace_server_detail
