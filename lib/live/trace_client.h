// A blocking client of the tracer's server (Boost.Beast): WebSocket and plain HTTP, with a
// deadline on every read so that a server that stops answering never hangs the caller. The tests,
// the load bench and the fuzzer use it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace magic {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// One GET (or another method) on 127.0.0.1:port, with `token` (when not empty) in an
// Authorization: Bearer header; status 0 when the connection failed.
HttpReply http_request(int port, const std::string& target, const std::string& method = "GET",
                       const std::string& token = "");

// Sends `bytes` on a plain TCP connection to 127.0.0.1:port (no protocol: junk, a partial
// request), then half-closes it when `half_close`, and reads what comes back for at most
// `linger`. Returns what the server sent.
std::string send_raw(int port, const std::string& bytes, bool half_close,
                     std::chrono::milliseconds linger = std::chrono::milliseconds(200));

class TraceClient {
 public:
  // Connects to ws://127.0.0.1:port/target, sending `origin` and the tracer's `token` (in an
  // Authorization: Bearer header; a target may carry ?token= instead) when they are not empty.
  // Throws std::runtime_error when the handshake fails (send_raw shows the server's answer).
  TraceClient(int port, const std::string& target = "/trace", const std::string& origin = "",
              const std::string& token = "");
  ~TraceClient();
  TraceClient(TraceClient&&) noexcept;

  void send_text(const std::string& text);
  void send_binary(const std::string& bytes);
  // The next message, or nullopt when the connection closed or `limit` passed.
  std::optional<std::string> read(std::chrono::milliseconds limit = std::chrono::seconds(20));
  // Closes the TCP connection without a WebSocket close (a vanished client).
  void drop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace magic
