// The tracer's server with a token (issue 46): every request without the right one is refused
// before it holds anything, with it everything is served; and what reaches the port cannot keep a
// viewer with the token out or take the run's file descriptors: 2,000 held connections, a burst of
// upgrades, a client that never finishes its request, one that sends controls without end.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "lib/core/error.h"
#include "lib/live/trace_client.h"
#include "lib/live/trace_server.h"
#include "lib/live/trace_token.h"
#include "tests/live_run.h"

namespace magic {
namespace {

using nlohmann::json;

const std::string kToken = "A-token_of-28-characters-xyz";

// A server with kToken whose log lines are kept.
struct Guarded {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::unique_ptr<TraceServer> server;

  explicit Guarded(TraceServerOptions options = {}) {
    options.token = kToken;
    options.assets["/"] = {"text/html; charset=utf-8", "<html>viewer</html>"};
    options.assets["/viewer.js"] = {"text/javascript", "// viewer"};
    TraceServerHooks hooks;
    hooks.hello = [] { return std::string(R"({"type":"hello"})"); };
    hooks.message = [](const std::string&) { return ClientReply{}; };
    hooks.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    };
    server = std::make_unique<TraceServer>(std::move(options), std::move(hooks));
  }
  int port() const { return server->port(); }
  // The lines logged so far that hold `text`.
  int logged(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    int n = 0;
    for (const std::string& l : lines) n += l.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
};

std::string hello_type(TraceClient& c) {
  const std::optional<std::string> m = c.read(std::chrono::seconds(20));
  return m ? json::parse(*m)["type"].get<std::string>() : "(nothing)";
}

// The status line a WebSocket upgrade of `target` gets, with `token` in a Bearer header when not
// empty ("HTTP/1.1 101 Switching Protocols" when accepted).
std::string upgrade_status(int port, const std::string& target, const std::string& token = "") {
  const std::string answer =
      send_raw(port,
               "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
                   (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n") + "\r\n",
               false);
  return answer.substr(0, answer.find('\r'));
}

const std::string kUpgradeWithoutToken =
    "GET /trace HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

TEST(TraceToken, IsMadeFromTheSystemsRandomSourceAndComparedWhole) {
  const std::string a = make_trace_token(), b = make_trace_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);  // 192 random bits each
  EXPECT_NO_THROW(check_trace_token(a));
  EXPECT_TRUE(token_matches(a, a));
  EXPECT_FALSE(token_matches(a.substr(0, 31), a));  // a prefix
  EXPECT_FALSE(token_matches(a + "x", a));          // longer
  EXPECT_FALSE(token_matches("", a));
  EXPECT_FALSE(token_matches("", ""));  // no token never matches
  std::string last = a;
  last.back() = last.back() == 'x' ? 'y' : 'x';
  EXPECT_FALSE(token_matches(last, a));
  for (const std::string& bad :
       std::vector<std::string>{"short", "sixteen-chars-but-a space", std::string(257, 'a'), "token/with/slash-1234"}) {
    try {
      check_trace_token(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--trace-token: expected 16 to 256 characters", 0), 0u) << e.what();
    }
  }
  // Where a request may carry it.
  EXPECT_EQ(request_token("/?a=1&token=abc", "", "", "c"), "abc");
  EXPECT_EQ(request_token("/", "Bearer xyz", "", "c"), "xyz");
  EXPECT_EQ(request_token("/", "Basic xyz", "c=k", "c"), "k");
  EXPECT_EQ(request_token("/?tokens=abc", "", "d=k", "c"), "");
}

TEST(TraceAuth, EveryRequestWithoutTheRightTokenIsRefusedAndWithItServed) {
  Guarded s;
  const int port = s.port();
  // Plain HTTP: nothing without the token, not even which paths exist.
  EXPECT_EQ(http_request(port, "/").status, 401);
  EXPECT_EQ(http_request(port, "/viewer.js").status, 401);
  EXPECT_EQ(http_request(port, "/no-such-path").status, 401);
  EXPECT_EQ(http_request(port, "/?token=" + kToken + "x").status, 403);
  EXPECT_EQ(http_request(port, "/?token=" + kToken.substr(1)).status, 403);
  EXPECT_EQ(http_request(port, "/", "GET", "wrong-token-of-enough-chars").status, 403);
  const HttpReply page = http_request(port, "/?token=" + kToken);
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.body, "<html>viewer</html>");
  EXPECT_EQ(http_request(port, "/viewer.js", "GET", kToken).status, 200);
  EXPECT_EQ(http_request(port, "/no-such-path", "GET", kToken).status, 404);
  // The page's own files come with the cookie the page was given; a WebSocket must not.
  const std::string cookie = "Cookie: magic_trace_" + std::to_string(port) + "=" + kToken + "\r\n";
  EXPECT_EQ(send_raw(port, "GET /viewer.js HTTP/1.1\r\nHost: x\r\n" + cookie + "\r\n", false).substr(0, 12),
            "HTTP/1.1 200");
  EXPECT_EQ(send_raw(port, kUpgradeWithoutToken.substr(0, kUpgradeWithoutToken.size() - 2) + cookie + "\r\n", false)
                .substr(0, 12),
            "HTTP/1.1 401");
  EXPECT_NE(send_raw(port, "GET /?token=" + kToken + " HTTP/1.1\r\nHost: x\r\n\r\n", false)
                .find("Set-Cookie: magic_trace_" + std::to_string(port) + "=" + kToken +
                      "; Path=/; HttpOnly; "
                      "SameSite=Strict"),
            std::string::npos);

  // The WebSocket: refused without it or with a wrong one, served with it in the URL or a header.
  EXPECT_EQ(upgrade_status(port, "/trace"), "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(upgrade_status(port, "/trace?token=not-the-token-at-all"), "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(upgrade_status(port, "/trace", "not-the-token-at-all"), "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(upgrade_status(port, "/trace?token=" + kToken), "HTTP/1.1 101 Switching Protocols");
  EXPECT_EQ(upgrade_status(port, "/trace", kToken), "HTTP/1.1 101 Switching Protocols");
  TraceClient by_url(port, "/trace?token=" + kToken);
  EXPECT_EQ(hello_type(by_url), "hello");
  TraceClient by_header(port, "/trace", "", kToken);
  EXPECT_EQ(hello_type(by_header), "hello");
  // A page of another site is refused even with the token (a token leaked into a page).
  EXPECT_THROW(TraceClient(port, "/trace", "http://evil.example", kToken), std::runtime_error);

  const TraceServerStats stats = s.server->stats();
  EXPECT_EQ(stats.unauthorized, 10);   // five without a token, five with a wrong one
  EXPECT_EQ(stats.clients_served, 4);  // two upgrades by hand, two clients
  // One line each, a few a second (the rest counted).
  EXPECT_GE(s.logged("trace: refused 127.0.0.1:"), 1);
  EXPECT_GE(s.logged(": no token (HTTP 401)"), 1);
  EXPECT_GE(s.logged(": a wrong token (HTTP 403)"), 1);
}

TEST(TraceAuth, NoTokenIsAllowedOnLoopbackOnly) {
  TraceServerOptions o;
  o.bind = "0.0.0.0";
  o.token = "";
  try {
    TraceServer refused(o, {[] { return std::string("{}"); }, [](const std::string&) { return ClientReply{}; }, {}});
    FAIL() << "served 0.0.0.0 without a token";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--trace-token none: only with a loopback --trace-bind (127.0.0.1, ::1), not 0.0.0.0");
  }
  EXPECT_TRUE(loopback_address("127.0.0.1"));
  EXPECT_TRUE(loopback_address("::1"));
  EXPECT_FALSE(loopback_address("0.0.0.0"));
  EXPECT_FALSE(loopback_address("192.168.1.1"));
}

// Issue 46: 2,000 connections that held the accepted slots left a late viewer a 503, and opening
// without end drove the process to EMFILE. Now the connections without the token are refused or
// closed as they come, the server never holds more than its budget of sockets, and the viewer
// with the token gets in.
TEST(TraceAuth, TwoThousandHeldConnectionsWithoutTheTokenDoNotKeepAViewerOut) {
  if (!testing::allow_descriptors(4600)) GTEST_SKIP() << "needs 4,600 file descriptors";
  TraceServerOptions o;
  o.request_time = std::chrono::seconds(60);  // none closed for slowness here: each fate is a bound's
  Guarded s(o);
  // Half send nothing, half ask for the WebSocket without the token; all are held open.
  const std::vector<int> held = testing::open_tokenless_flood(s.port(), 2000);
  ASSERT_EQ(held.size(), 2000u);
  const auto start = std::chrono::steady_clock::now();
  TraceClient viewer(s.port(), "/trace?token=" + kToken);
  EXPECT_EQ(hello_type(viewer), "hello");
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The server answers the last of them as the viewer comes: wait until its counts and the
  // clients' views agree.
  std::map<std::string, int> fates;
  TraceServerStats stats;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fates = testing::connection_fates(held);
    stats = s.server->stats();
  } while ((fates["HTTP/1.1 401 Unauthorized"] != stats.unauthorized || fates["closed"] != stats.connections_shed) &&
           std::chrono::steady_clock::now() < until);
  std::cout << "2000 held: " << fates["HTTP/1.1 401 Unauthorized"] << " refused (401), " << fates["closed"]
            << " closed unanswered, " << fates["open"] << " still waiting; the viewer got in after " << waited_ms
            << " ms; " << s.logged("trace:") << " lines logged\n";
  // Every connection is one of: refused for want of the token, closed to make room, still waiting.
  EXPECT_EQ(fates["HTTP/1.1 401 Unauthorized"] + fates["closed"] + fates["open"], 2000);
  EXPECT_EQ(fates["HTTP/1.1 401 Unauthorized"], stats.unauthorized);
  EXPECT_EQ(fates["closed"], stats.connections_shed);
  EXPECT_LE(fates["open"], trace_limits::kMaxWaitingRequests);
  EXPECT_GE(fates["HTTP/1.1 401 Unauthorized"], 900);  // the tokenless requests, nearly all read
  EXPECT_EQ(s.server->clients(), 1);
  // Never more sockets open than the budget, however many came.
  EXPECT_EQ(stats.sockets_allowed, trace_limits::kMaxSockets);
  EXPECT_LE(stats.sockets_peak, stats.sockets_allowed);
  EXPECT_GT(stats.sockets_peak, trace_limits::kMaxWaitingRequests / 2);  // the flood did fill it
  // The log said why, a few lines a second, not 2,000.
  EXPECT_GT(s.logged("trace: refused 127.0.0.1:"), 0);
  EXPECT_LT(s.logged("trace:"), 100);
  testing::close_all(held);
}

// The budget of sockets holds on its own: with room for more waiting connections than sockets,
// a flood still finds the server at its budget, and the viewer gets in.
TEST(TraceAuth, TheBudgetOfSocketsHoldsWhateverElseWouldAllow) {
  TraceServerOptions o;
  o.max_sockets = 20;
  o.max_waiting_requests = 1000;
  o.request_time = std::chrono::seconds(60);
  Guarded s(o);
  const std::vector<int> held = testing::open_tokenless_flood(s.port(), 200);
  ASSERT_EQ(held.size(), 200u);
  TraceClient viewer(s.port(), "/trace", "", kToken);
  EXPECT_EQ(hello_type(viewer), "hello");
  const TraceServerStats stats = s.server->stats();
  EXPECT_EQ(stats.sockets_allowed, 20);
  EXPECT_EQ(stats.sockets_peak, 20);
  EXPECT_GT(stats.connections_shed, 0);
  testing::close_all(held);
}

// Upgrades with the token, all sent before the server reads the first: exactly kMaxClients get in,
// the others get 503 (a slot is taken as the upgrade is accepted, before its handshake ends).
TEST(TraceAuth, ABurstOfUpgradesWithTheTokenGetsMaxClientsAndNoMore) {
  Guarded s;
  constexpr int kTries = 40;
  const std::string upgrade =
      kUpgradeWithoutToken.substr(0, kUpgradeWithoutToken.size() - 2) + "Authorization: Bearer " + kToken + "\r\n\r\n";
  std::vector<int> held;
  for (int i = 0; i < kTries; ++i) held.push_back(testing::open_held(s.port(), upgrade));
  std::map<std::string, int> fates;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fates = testing::connection_fates(held);
  } while (fates["open"] > 0 && std::chrono::steady_clock::now() < until);
  EXPECT_EQ(fates["HTTP/1.1 101 Switching Protocols"], trace_limits::kMaxClients);
  EXPECT_EQ(fates["HTTP/1.1 503 Service Unavailable"], kTries - trace_limits::kMaxClients);
  EXPECT_EQ(s.server->clients(), trace_limits::kMaxClients);
  EXPECT_GE(s.logged(" WebSocket clients already (HTTP 503)"), 1);
  testing::close_all(held);
}

TEST(TraceAuth, AClientThatNeverFinishesItsRequestIsClosedAfterTheRequestTimeWhileAViewerIsServed) {
  TraceServerOptions o;
  o.request_time = std::chrono::milliseconds(1000);
  Guarded s(o);
  // Slow loris: a request begun, the token in it even, never finished.
  const int loris = testing::open_held(s.port(), "GET /trace?token=" + kToken + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpg");
  ASSERT_GE(loris, 0);
  TraceClient viewer(s.port(), "/trace", "", kToken);
  EXPECT_EQ(hello_type(viewer), "hello");
  EXPECT_EQ(testing::connection_fate(loris), "open");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (testing::connection_fate(loris) == "open" && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(testing::connection_fate(loris), "closed");
  EXPECT_EQ(s.server->stats().connections_shed, 1);
  EXPECT_EQ(s.logged(": no whole request within 1 s"), 1);
  s.server->publish(TraceEvent::make({{"type", "record"}, {"seq", 0}}));
  EXPECT_EQ(hello_type(viewer), "record");  // served all along
  testing::close_all({loris});
}

TEST(TraceAuth, AClientSendingControlsWithoutEndIsDroppedAndTheOthersServed) {
  TraceServerOptions o;
  o.control_messages_per_second = 5;
  Guarded s(o);
  TraceClient flood(s.port(), "/trace", "", kToken), calm(s.port(), "/trace", "", kToken);
  EXPECT_EQ(hello_type(flood), "hello");
  EXPECT_EQ(hello_type(calm), "hello");
  calm.send_text("{}");
  try {
    for (int i = 0; i < 200; ++i) flood.send_text("{}");
  } catch (const std::exception&) {
    // The server closed it mid-flood.
  }
  EXPECT_FALSE(flood.read(std::chrono::seconds(5)).has_value());
  EXPECT_EQ(s.logged("dropped client 127.0.0.1:"), 1);
  EXPECT_EQ(s.logged(": over 5 control messages a second"), 1);
  s.server->publish(TraceEvent::make({{"type", "record"}, {"seq", 0}}));
  EXPECT_EQ(hello_type(calm), "record");
}

// A failure inside the tracer (here its greeting) ends that client, not the server or the run.
TEST(TraceAuth, AFailureOfAHookEndsThatClientOnly) {
  std::atomic<int> greeted{0};
  std::vector<std::string> lines;
  std::mutex mutex;
  TraceServerOptions o;
  o.token = kToken;
  TraceServer server(o, {[&] {
                           if (greeted++ == 0) throw std::runtime_error("no state yet");
                           return std::string(R"({"type":"hello"})");
                         },
                         [](const std::string&) { return ClientReply{}; },
                         [&](const std::string& line) {
                           std::lock_guard<std::mutex> lock(mutex);
                           lines.push_back(line);
                         }});
  TraceClient first(server.port(), "/trace", "", kToken);
  EXPECT_FALSE(first.read(std::chrono::seconds(5)).has_value());  // ended
  TraceClient second(server.port(), "/trace", "", kToken);
  EXPECT_EQ(hello_type(second), "hello");
  EXPECT_EQ(server.clients(), 1);
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(": its greeting failed: no state yet"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace magic
