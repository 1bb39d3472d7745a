#include "lib/live/trace_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <array>
#include <functional>
#include <stdexcept>

namespace magic {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

HttpReply http_request(int port, const std::string& target, const std::string& method, const std::string& token) {
  net::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.expires_after(std::chrono::seconds(10));
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)), ec);
  if (ec) return {};
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  http::write(stream, req, ec);
  if (ec) return {};
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res, ec);
  if (ec && ec != http::error::end_of_stream) return {};
  return {static_cast<int>(res.result_int()), std::string(res[http::field::content_type]), res.body()};
}

std::string send_raw(int port, const std::string& bytes, bool half_close, std::chrono::milliseconds linger) {
  net::io_context io;
  tcp::socket socket(io);
  beast::error_code ec;
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)), ec);
  if (ec) return {};
  net::write(socket, net::buffer(bytes), ec);
  if (half_close) socket.shutdown(tcp::socket::shutdown_send, ec);
  std::string received;
  std::array<char, 4096> chunk{};
  std::function<void()> read_more = [&] {
    socket.async_read_some(net::buffer(chunk), [&](beast::error_code e, size_t n) {
      received.append(chunk.data(), n);
      if (!e) read_more();
    });
  };
  read_more();
  io.run_for(linger);
  return received;
}

struct TraceClient::State {
  net::io_context io;
  websocket::stream<beast::tcp_stream> ws{io};
  beast::flat_buffer buffer;
};

TraceClient::TraceClient(int port, const std::string& target, const std::string& origin, const std::string& token)
    : state_(std::make_unique<State>()) {
  beast::get_lowest_layer(state_->ws).expires_after(std::chrono::seconds(10));
  beast::get_lowest_layer(state_->ws)
      .connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  state_->ws.set_option(websocket::stream_base::decorator([origin, token](websocket::request_type& req) {
    if (!origin.empty()) req.set(http::field::origin, origin);
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  }));
  websocket::response_type res;
  beast::error_code ec;
  state_->ws.handshake(res, "127.0.0.1:" + std::to_string(port), target, ec);
  // Beast keeps the response of a declined handshake to itself: the status is not known here.
  if (ec) throw std::runtime_error("handshake refused: " + ec.message());
  beast::get_lowest_layer(state_->ws).expires_never();
}

TraceClient::~TraceClient() = default;
TraceClient::TraceClient(TraceClient&&) noexcept = default;

void TraceClient::send_text(const std::string& text) {
  state_->ws.text(true);
  state_->ws.write(net::buffer(text));
}

void TraceClient::send_binary(const std::string& bytes) {
  state_->ws.binary(true);
  state_->ws.write(net::buffer(bytes));
}

std::optional<std::string> TraceClient::read(std::chrono::milliseconds limit) {
  std::optional<std::string> out;
  state_->buffer.clear();
  state_->ws.async_read(state_->buffer, [&](beast::error_code ec, size_t) {
    if (!ec) out = beast::buffers_to_string(state_->buffer.data());
  });
  state_->io.restart();
  state_->io.run_for(limit);
  if (!state_->io.stopped()) {
    // The deadline passed: cancel the read and let its handler run.
    beast::error_code ignored;
    beast::get_lowest_layer(state_->ws).socket().cancel(ignored);
    state_->io.restart();
    state_->io.run();
  }
  return out;
}

void TraceClient::drop() {
  beast::error_code ignored;
  beast::get_lowest_layer(state_->ws).socket().close(ignored);
}

}  // namespace magic
