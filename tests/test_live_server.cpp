// The tracer's server on loopback: the viewer's files and 404s, the WebSocket on /trace only and
// from its own origin, control messages and their errors, frames too big, binary frames, a client
// that vanishes or stops reading (it loses records and is told how many; publishing never waits).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lib/live/trace_client.h"
#include "lib/live/trace_control.h"
#include "lib/live/trace_server.h"

namespace magic {
namespace {

using nlohmann::json;

// A server whose control is a plain TraceControl, as magic-run wires it to its tracer.
struct Served {
  TraceControl control = default_control();
  std::unique_ptr<TraceServer> server;
  std::chrono::milliseconds hello_delay{0};  // a slow greeting, as under a sanitizer

  explicit Served(TraceServerOptions options = {}) {
    options.assets["/"] = {"text/html; charset=utf-8", "<html>viewer</html>"};
    TraceServerHooks hooks;
    hooks.hello = [this] {
      std::this_thread::sleep_for(hello_delay);
      return json({{"type", "hello"}, {"control", control_json(control)}}).dump();
    };
    hooks.message = [this](const std::string& text) {
      ClientReply reply;
      try {
        control = parse_control_message(text);
        reply.to_all = json({{"type", "control"}, {"control", control_json(control)}}).dump();
      } catch (const ControlError& e) {
        reply.to_sender = json({{"type", "error"}, {"field", e.field()}, {"message", e.message()}}).dump();
      }
      return reply;
    };
    server = std::make_unique<TraceServer>(std::move(options), std::move(hooks));
  }
  int port() const { return server->port(); }
  void record(int64_t seq, size_t padding = 0) {
    json m = {{"type", "record"}, {"seq", seq}, {"pad", std::string(padding, 'x')}};
    server->publish(TraceEvent::make(m));
  }
};

json next(TraceClient& c) {
  const std::optional<std::string> m = c.read();
  if (!m) return json({{"type", "(nothing)"}});
  return json::parse(*m);
}

TEST(TraceServer, ServesTheViewerAndRefusesEveryOtherPath) {
  Served s;
  const auto page = http_request(s.port(), "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.body, "<html>viewer</html>");
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(http_request(s.port(), "/?ws=x").status, 200);
  EXPECT_EQ(http_request(s.port(), "/../etc/passwd").status, 404);
  EXPECT_EQ(http_request(s.port(), "/trace").status, 404);  // not an upgrade
  EXPECT_EQ(http_request(s.port(), "/", "POST").status, 405);
  EXPECT_THROW(TraceClient(s.port(), "/other"), std::runtime_error);
  EXPECT_THROW(TraceClient(s.port(), "/trace", "http://evil.example"), std::runtime_error);
  EXPECT_THROW(TraceClient(s.port(), "/trace", "http://127.0.0.1:1"), std::runtime_error);
  TraceClient own(s.port(), "/trace", "http://127.0.0.1:" + std::to_string(s.port()));
  EXPECT_EQ(next(own)["type"], "hello");
  TraceClient local(s.port(), "/trace", "http://localhost:" + std::to_string(s.port()));
  EXPECT_EQ(next(local)["type"], "hello");
}

TEST(TraceServer, StreamsRecordsInOrderAndAppliesControlsForEveryClient) {
  Served s;
  TraceClient a(s.port()), b(s.port());
  EXPECT_EQ(next(a)["type"], "hello");
  EXPECT_EQ(next(b)["type"], "hello");
  for (int64_t i = 0; i < 100; ++i) s.record(i);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(next(a)["seq"], i);
    EXPECT_EQ(next(b)["seq"], i);
  }
  a.send_text(R"({"type":"control","paused":true,"points":[{"compressor":"empty"}]})");
  for (TraceClient* c : {&a, &b}) {
    const json m = next(*c);
    EXPECT_EQ(m["type"], "control");
    EXPECT_EQ(m["control"]["paused"], true);
  }
  EXPECT_TRUE(s.control.paused);
  a.send_text(R"({"type":"control","points":[{"compressor":"tile","grid":[0,4]}]})");
  const json e = next(a);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["field"], "points[0].grid[0]");
  EXPECT_TRUE(s.control.paused);  // the control in force did not change
  a.send_binary(std::string("\x00\xff\x13", 3));
  EXPECT_EQ(next(a)["field"], "(message)");
  s.record(100);
  EXPECT_EQ(next(a)["seq"], 100);  // still served after both refusals
  EXPECT_EQ(next(b)["seq"], 100);
}

TEST(TraceServer, AFrameTooBigEndsThatClientOnlyAndAVanishedOneIsForgotten) {
  TraceServerOptions o;
  o.max_frame_bytes = 1024;
  Served s(o);
  TraceClient big(s.port()), gone(s.port()), good(s.port());
  for (TraceClient* c : {&big, &gone, &good}) next(*c);
  big.send_text(std::string(2048, ' '));
  EXPECT_FALSE(big.read(std::chrono::seconds(5)).has_value());  // closed by the server
  gone.drop();
  for (int64_t i = 0; i < 50; ++i) s.record(i);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(next(good)["seq"], i);
  TraceClient late(s.port());
  EXPECT_EQ(next(late)["type"], "hello");
}

TEST(TraceServer, AClientThatStopsReadingLosesRecordsAndIsToldHowMany) {
  TraceServerOptions o;
  o.queue_bytes = 64 * 1024;
  Served s(o);
  TraceClient slow(s.port());
  next(slow);
  // 40000 records of ~1 KiB (40 MB): far more than the queue and the sockets' buffers hold while the
  // client reads nothing. publish() must return for every one of them.
  for (int64_t i = 0; i < 40000; ++i) s.record(i, 1000);
  EXPECT_GT(s.server->stats().records_dropped, 0);
  // Now read everything: each record is the previous one's successor, or a drop notice accounts
  // for the gap exactly.
  int64_t expected = 0, received = 0, dropped = 0;
  while (expected < 40000) {
    const json m = next(slow);
    ASSERT_NE(m["type"], "(nothing)") << "stream ended at seq " << expected;
    if (m["type"] == "dropped") {
      expected += m["count"].get<int64_t>();
      dropped += m["count"].get<int64_t>();
      EXPECT_EQ(m["total"], dropped);
      continue;
    }
    ASSERT_EQ(m["seq"], expected);
    ++expected;
    ++received;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(received + dropped, 40000);
  EXPECT_EQ(s.server->stats().records_dropped, dropped);
}

TEST(TraceServer, ClosingSendsWhatIsQueuedThenEndsEveryConnection) {
  Served s;
  TraceClient a(s.port());
  next(a);
  s.record(0);
  s.server->publish(TraceEvent::make({{"type", "end"}, {"records", 1}}));
  s.server->close();
  EXPECT_EQ(next(a)["seq"], 0);
  EXPECT_EQ(next(a)["type"], "end");
  EXPECT_FALSE(a.read(std::chrono::seconds(5)).has_value());
  EXPECT_EQ(http_request(s.port(), "/").status, 0);
}

// Issue 43: a client that connected mid-run got no history. It now gets the hello, the history
// (a stride of each series with its first and latest record), the live records, and the end even
// when it comes after it.
TEST(TraceServer, AClientThatComesLateGetsTheHistoryThenTheLiveRecordsAndTheEnd) {
  TraceServerOptions o;
  o.history.points_per_series = 8;
  Served s(o);
  TraceClient early(s.port());
  EXPECT_EQ(next(early)["type"], "hello");
  for (int64_t i = 0; i < 100; ++i) s.record(i);
  TraceClient late(s.port());
  EXPECT_EQ(next(late)["type"], "hello");
  const json h = next(late);
  EXPECT_EQ(h["type"], "history");
  EXPECT_EQ(h["seen"], 100);
  // The stride is the smallest power of two with at most 8 of indices 0..99 on it: 16 (0, 16,
  // ..., 96), then the latest, 99.
  const std::vector<int64_t> expected = {0, 16, 32, 48, 64, 80, 96, 99};
  ASSERT_EQ(h["records"], expected.size());
  for (int64_t seq : expected) EXPECT_EQ(next(late)["seq"], seq);
  s.record(100);
  EXPECT_EQ(next(late)["seq"], 100);                                    // then live
  for (int64_t i = 0; i <= 100; ++i) EXPECT_EQ(next(early)["seq"], i);  // the early client got no history
  EXPECT_EQ(s.server->stats().history_records, 8);                      // 0, 16, ..., 96 and 100
  s.server->publish(TraceEvent::make({{"type", "end"}, {"records", 101}}));
  EXPECT_EQ(next(late)["type"], "end");
  TraceClient after_end(s.port());
  EXPECT_EQ(next(after_end)["type"], "hello");
  EXPECT_EQ(next(after_end)["records"], 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(next(after_end)["type"], "record");
  EXPECT_EQ(next(after_end)["type"], "end");
}

// --trace-wait starts the run once clients() counts one: a client counts once it is subscribed,
// so the run's first record reaches it live, not as history. Under ThreadSanitizer the greeting
// was slow enough for a run to publish its first records while the client was only accepted.
TEST(TraceServer, AClientCountsOnceSubscribedSoTheRecordsAfterTheWaitReachItLive) {
  Served s;
  s.hello_delay = std::chrono::milliseconds(300);
  TraceClient viewer(s.port());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.server->clients() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(s.server->clients(), 1);
  s.record(0);
  EXPECT_EQ(next(viewer)["type"], "hello");
  const json first = next(viewer);
  EXPECT_EQ(first["type"], "record") << first.dump();
  EXPECT_EQ(first["seq"], 0);
}

TEST(TraceServer, APortInUseIsRefusedByName) {
  Served s;
  TraceServerOptions o;
  o.port = s.port();
  try {
    Served again(o);
    FAIL() << "bound twice";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--trace-port " + std::to_string(s.port())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace magic
