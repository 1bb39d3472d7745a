// 10,000 random and malformed inputs to the tracer of a real run: text that is not JSON, JSON of
// every wrong shape, controls with unknown fields, wrong types and values out of range, binary
// frames, invalid UTF-8, frames over the limit, deep nesting, junk that is not HTTP, requests cut
// off and half-closed, foreign origins, clients that vanish. The server must keep serving (a
// client connected throughout gets its stream, in order, to the end), the run must finish, and
// its scores must equal a run's without the tracer, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "lib/io/safetensors.h"
#include "tests/live_run.h"
#include "tests/support.h"

namespace magic {
namespace {

using nlohmann::json;

enum Case {
  kNotJson,
  kWrongShape,
  kBadControl,
  kValidControl,
  kBinary,
  kBadUtf8,
  kOversized,
  kDeepNesting,
  kRawJunk,
  kCutRequest,
  kUnknownPath,
  kForeignOrigin,
  kVanish,
  kCases
};

const char* case_name(int c) {
  static const char* names[] = {"not JSON",      "wrong shape",    "bad control",    "valid control", "binary",
                                "invalid UTF-8", "oversized",      "deep nesting",   "raw junk",      "cut request",
                                "unknown path",  "foreign origin", "vanished client"};
  return names[c];
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string random_printable(std::mt19937_64& rng, size_t n) {
  std::string s(n, ' ');
  for (char& c : s) c = static_cast<char>(32 + rng() % 95);
  return s;
}

// A control message with one thing wrong in it.
std::string bad_control(std::mt19937_64& rng) {
  json rule = {{"kind", "activation"}, {"compressor", "tile"}, {"grid", {8, 8}}};
  json m = {{"type", "control"}, {"paused", false}, {"points", {rule}}};
  switch (rng() % 12) {
    case 0:
      m["points"][0]["compressor"] = random_printable(rng, 1 + rng() % 12);
      break;
    case 1:
      m["points"][0]["grid"] = {static_cast<int64_t>(rng() % 100000) - 50000, 1};
      break;
    case 2:
      m["points"][0]["every"] = -static_cast<int64_t>(rng() % 10);
      break;
    case 3:
      m["points"][0][random_printable(rng, 5)] = 1;
      break;
    case 4:
      m["paused"] = "yes";
      break;
    case 5:
      m["points"] = json::array();
      for (int i = 0; i < 70; ++i) m["points"].push_back(rule);
      break;
    case 6:
      m["points"][0]["kind"] = 12;
      break;
    case 7:
      m["type"] = random_printable(rng, 6);
      break;
    case 8:
      m.erase("points");
      break;
    case 9:
      m["points"][0]["grid"] = "32x32";
      break;
    case 10:
      m["points"][0]["k"] = 5;
      break;  // k on a tile rule
    default:
      m["points"][0]["layer"] = std::string(300, 'x');
      break;
  }
  return m.dump();
}

std::string valid_control(std::mt19937_64& rng) {
  static const char* compressors[] = {"none", "stats", "tile", "projection", "top", "empty"};
  json points = json::array();
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    json r = {{"kind", trace_kinds()[rng() % trace_kinds().size()]}, {"compressor", compressors[rng() % 6]}};
    if (rng() % 3 == 0) r["every"] = 1 + static_cast<int64_t>(rng() % 5);
    points.push_back(r);
  }
  points.push_back({{"compressor", "stats"}});
  return json({{"type", "control"}, {"paused", rng() % 8 == 0}, {"points", points}}).dump();
}

std::string wrong_shape(std::mt19937_64& rng) {
  static const char* shapes[] = {"null",
                                 "3",
                                 "\"control\"",
                                 "[]",
                                 "[{\"type\":\"control\"}]",
                                 "{}",
                                 "true",
                                 "{\"type\":null}",
                                 "{\"type\":\"control\",\"points\":null}",
                                 "1e999"};
  return shapes[rng() % 10];
}

// One fuzzing client: a WebSocket it reconnects whenever the server ended it.
struct Fuzzer {
  int port;
  std::string token;
  std::optional<TraceClient> ws;
  int64_t reconnects = 0;

  TraceClient& client() {
    if (!ws) {
      ws.emplace(port, "/trace", "", token);
      ++reconnects;
    }
    return *ws;
  }
  // Sends; a send the server refused ends this connection (a frame it closed us for).
  void send(const std::string& text, bool binary = false) {
    try {
      if (binary) {
        client().send_binary(text);
      } else {
        client().send_text(text);
      }
    } catch (const std::exception&) {
      ws.reset();
    }
  }
};

TEST(LiveFuzz, TenThousandBadInputsNeitherStopTheServerNorChangeTheRun) {
  // The demonstration's model and data, 16 steps: a run that outlasts the fuzz (about 2 s here) by
  // several times, with room for a machine whose other core is busy (with 8 steps the run once
  // ended first beside the rest of the suite); the test says so if it does not.
  const std::string config = testing::source_path("fixtures/runs/demo.json") + " --training.steps 16";
  const std::string plain = testing::fresh_dir("live-fuzz-plain"), traced = testing::fresh_dir("live-fuzz-traced");
  ASSERT_EQ(testing::magic_run("--config " + config + " --out " + plain).exit_code, 0);

  // The run waits for the watching client; the fuzz runs while it trains and replays.
  testing::BackgroundRun run("--config " + config + " --out " + traced + " --trace-port 0 --trace-wait 60",
                             ::testing::TempDir() + "/live-fuzz.log");
  const int port = run.port();
  ASSERT_GT(port, 0) << run.join().output;
  StreamCheck watched;
  std::thread watcher([&] {
    TraceClient c(port, "/trace", "", run.token());
    watched = read_stream(c);
  });

  std::mt19937_64 rng(2031);
  Fuzzer fuzz{port, run.token(), std::nullopt, 0};
  std::vector<int64_t> counts(kCases, 0);
  const std::string origin = "http://evil.example";
  int64_t cases = 0;
  const auto start = std::chrono::steady_clock::now();
  for (; cases < 10000 && !run.finished(); ++cases) {
    const int c = static_cast<int>(rng() % 100 < 80 ? rng() % 5 : 5 + rng() % (kCases - 5));
    ++counts[c];
    switch (c) {
      case kNotJson:
        fuzz.send(random_printable(rng, rng() % 200));
        break;
      case kWrongShape:
        fuzz.send(wrong_shape(rng));
        break;
      case kBadControl:
        fuzz.send(bad_control(rng));
        break;
      case kValidControl:
        fuzz.send(valid_control(rng));
        break;
      case kBinary:
        fuzz.send(random_bytes(rng, rng() % 512), /*binary=*/true);
        break;
      case kBadUtf8:
        fuzz.send("{\"type\":\"control\",\"x\":\"\xff\xfe\xc3\"}");
        break;
      case kOversized:
        fuzz.send(std::string((size_t{1} << 20) + 1 + rng() % 100, 'x'));
        break;
      case kDeepNesting:
        fuzz.send(std::string(100000, '[') + std::string(100000, ']'));
        break;
      case kRawJunk:
        send_raw(port, random_bytes(rng, 1 + rng() % 2000), rng() % 2 == 0, std::chrono::milliseconds(5));
        break;
      case kCutRequest:
        send_raw(port, std::string("GET /trace HTTP/1.1\r\nHost: x\r\nUpgrade: websock").substr(0, rng() % 45), true,
                 std::chrono::milliseconds(5));
        break;
      case kUnknownPath:
        http_request(port, "/" + random_printable(rng, 1 + rng() % 30), "GET", run.token());
        break;
      case kForeignOrigin:
        try {
          TraceClient refused(port, "/trace", origin, run.token());
          ADD_FAILURE() << "a foreign origin was accepted";
        } catch (const std::exception&) {
        }
        break;
      case kVanish:
        try {
          TraceClient gone(port, "/trace", "", run.token());
          gone.drop();
        } catch (const std::exception&) {
          // Only if the run ended meanwhile, which the loop's condition sees next.
        }
        break;
    }
  }
  const double fuzz_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(run.finished()) << "the run ended after " << cases << " of the 10,000 inputs (" << fuzz_seconds
                               << " s): the test needs a longer run";
  // The control the fuzz leaves in force streams again, to everyone.
  fuzz.send(R"({"type":"control","paused":false,"points":[{"compressor":"stats"}]})");
  // Still serving after all of it: the viewer's page, and a new client's greeting.
  EXPECT_EQ(http_request(port, "/", "GET", run.token()).status, 200);
  TraceClient late(port, "/trace", "", run.token());
  const auto hello = late.read(std::chrono::seconds(20));
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(json::parse(*hello)["type"], "hello");
  late.drop();
  watcher.join();
  const auto outcome = run.join();
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;

  EXPECT_EQ(watched.error, "");
  EXPECT_GT(watched.records, 0);
  EXPECT_TRUE(at::equal(load_safetensors(plain + "/scores.safetensors").tensors.at("scores"),
                        load_safetensors(traced + "/scores.safetensors").tensors.at("scores")));
  std::string tally;
  for (int c = 0; c < kCases; ++c) {
    tally += std::string(c ? ", " : "") + case_name(c) + " " + std::to_string(counts[c]);
    EXPECT_GT(counts[c], 0) << case_name(c);
  }
  std::cout << "live fuzz: " << cases << " inputs in " << fuzz_seconds << " s (" << tally << "); " << fuzz.reconnects
            << " connections of the fuzzing client; the watching client: " << watched.records << " records, "
            << watched.dropped << " dropped" << std::endl;
  EXPECT_EQ(cases, 10000);
  std::filesystem::remove_all(plain);
  std::filesystem::remove_all(traced);
}

}  // namespace
}  // namespace magic
