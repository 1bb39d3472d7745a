// The tracer sink, its client queue and its file: records selected by the control, sent once,
// in order, with a drop count where a queue was full; the running scores; the file read back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "lib/live/client_queue.h"
#include "lib/live/stream_check.h"
#include "lib/live/trace_file.h"
#include "lib/live/tracer_sink.h"

namespace magic {
namespace {

using nlohmann::json;

struct Collected : TraceOutput {
  std::vector<std::shared_ptr<const TraceEvent>> events;
  void publish(const std::shared_ptr<const TraceEvent>& e) override { events.push_back(e); }
};

json msg(const std::shared_ptr<const TraceEvent>& e) {
  return json::parse(e->text);
}

TraceOrigin origin() {
  return {"run.json", 0, 1, {}, {}};
}

TEST(TracerSink, SendsWhatTheControlSelectsOnceInOrder) {
  TracerSink sink(origin(), parse_control_message(R"({"type":"control","points":[
      {"kind":"loss","compressor":"none"},{"kind":"activation","compressor":"stats","every":2}]})"));
  Collected out;
  sink.add_output(&out);
  const at::Tensor x = at::ones({2, 3}, at::kDouble);
  for (int64_t t = 0; t < 4; ++t) {
    sink.write({"loss", "loss", "forward", "forward", t, "", {}}, at::scalar_tensor(1.5 + t, at::kDouble));
    sink.write({"blocks.0", "activation", "forward", "forward", t, "blocks.0", {}}, x);
    sink.write({"head.weight", "gradient", "backward", "first", t, "", {}}, x);  // no rule: not sent
  }
  // REPLAY recomputing step 1 makes its records again: sent once.
  sink.write({"loss", "loss", "forward", "forward", 1, "", {}}, at::scalar_tensor(9.0, at::kDouble));
  sink.finish("finished");
  ASSERT_EQ(out.events.size(), 4u + 2u + 1u);
  for (size_t i = 0; i + 1 < out.events.size(); ++i) {
    EXPECT_TRUE(out.events[i]->record);
    EXPECT_EQ(msg(out.events[i])["seq"], static_cast<int64_t>(i));
  }
  EXPECT_EQ(msg(out.events[0])["data"]["values"], json({1.5}));
  EXPECT_EQ(msg(out.events[0])["shape"], json::array());
  EXPECT_EQ(msg(out.events[1])["compressor"], "stats");
  EXPECT_EQ(msg(out.events[1])["layer"], "blocks.0");
  EXPECT_EQ(msg(out.events[1])["dtype"], "fp64");
  EXPECT_EQ(msg(out.events.back())["type"], "end");
  EXPECT_EQ(msg(out.events.back())["records"], 6);
  EXPECT_EQ(out.events[2]->seq, 2);
}

TEST(TracerSink, PausedSendsNothingAndANewControlTakesEffectAtTheNextRecord) {
  TracerSink sink(origin(), default_control());
  Collected out;
  sink.add_output(&out);
  TraceControl paused = default_control();
  paused.paused = true;
  sink.set_control(paused);
  sink.write({"loss", "loss", "forward", "forward", 0, "", {}}, at::ones({}));
  EXPECT_TRUE(out.events.empty());
  sink.set_control(parse_control_message(R"({"type":"control","points":[{"compressor":"empty"}]})"));
  sink.write({"loss", "loss", "forward", "forward", 1, "", {}}, at::ones({}));
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(msg(out.events[0])["compressor"], "empty");
  EXPECT_EQ(msg(out.events[0])["seq"], 0);
}

TEST(TracerSink, RunningScoresAreTheSumOfTheStepContributionsSoFar) {
  TracerSink sink(origin(),
                  parse_control_message(R"({"type":"control","points":[{"kind":"score","compressor":"none"}]})"));
  Collected out;
  sink.add_output(&out);
  const std::vector<at::Tensor> dw = {at::tensor({1.0, 2.0}, at::kDouble), at::tensor({0.5, -4.0}, at::kDouble)};
  sink.write({"scores", "score", "replay", "metagradient", 1, "", {}}, dw[1]);
  sink.write({"scores", "score", "replay", "metagradient", 0, "", {}}, dw[0]);
  ASSERT_EQ(out.events.size(), 4u);
  EXPECT_EQ(msg(out.events[1])["name"], "running_scores");
  EXPECT_EQ(msg(out.events[1])["data"]["values"], json({0.5, -4.0}));
  EXPECT_EQ(msg(out.events[3])["step"], 0);
  EXPECT_EQ(msg(out.events[3])["data"]["values"], json({1.5, -2.0}));
}

// magic-check's runs on one sink: each run's records carry its name, a record of the same
// identity is sent again in the next run, and the running scores start again.
TEST(TracerSink, EachRunIsSentWholeUnderItsNameWithItsOwnRunningScores) {
  TracerSink sink(origin(), parse_control_message(R"({"type":"control","points":[{"compressor":"none"}]})"));
  Collected out;
  sink.add_output(&out);
  const at::Tensor dw = at::tensor({1.0, -2.0}, at::kDouble);
  for (const std::string run : {"clean", "mutation missing-reduce"}) {
    sink.begin_run(run);
    EXPECT_EQ(sink.hello()["run"], run);
    sink.write({"loss", "loss", "forward", "forward", 0, "", {}}, at::scalar_tensor(2.0, at::kDouble));
    sink.write({"loss", "loss", "forward", "forward", 0, "", {}}, at::scalar_tensor(2.0, at::kDouble));
    sink.write({"scores", "score", "replay", "metagradient", 0, "", {}}, dw);
  }
  // Per run: the loss once, the step's contribution and the running scores.
  ASSERT_EQ(out.events.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(msg(out.events[i])["run"], i < 3 ? "clean" : "mutation missing-reduce") << i;
    EXPECT_EQ(msg(out.events[i])["seq"], static_cast<int64_t>(i));  // seq counts the rank's records across runs
  }
  EXPECT_EQ(msg(out.events[5])["name"], "running_scores");
  EXPECT_EQ(msg(out.events[5])["data"]["values"], json({1.0, -2.0}));  // not 2, -4: started again
}

// The first-divergence recorder of magic-check is added beside the live tracer: both hear every
// trace point, and the tracer listens alone again once the recorder's scope ends.
TEST(ScopedAddedTraceSink, BothSinksHearEveryRecordAndTheOneBeforeIsRestored) {
  Collected first_out, second_out;
  TracerSink first(origin(), parse_control_message(R"({"type":"control","points":[{"compressor":"empty"}]})"));
  TracerSink second(origin(), parse_control_message(R"({"type":"control","points":[{"compressor":"empty"}]})"));
  first.add_output(&first_out);
  second.add_output(&second_out);
  const at::Tensor x = at::ones({2});
  {
    const ScopedTraceSink listening(&first);
    {
      const ScopedAddedTraceSink added(&second);
      trace_point(x, [] { return TraceRecord{"a", "other", "optimizer", "first", 0, "", {}}; });
    }
    trace_point(x, [] { return TraceRecord{"b", "other", "optimizer", "first", 0, "", {}}; });
  }
  EXPECT_FALSE(tracing());
  ASSERT_EQ(first_out.events.size(), 2u);
  ASSERT_EQ(second_out.events.size(), 1u);
  EXPECT_EQ(msg(second_out.events[0])["name"], "a");
  EXPECT_EQ(msg(first_out.events[1])["name"], "b");
  {
    const ScopedAddedTraceSink alone(&second);  // nothing listened before: it listens alone
    trace_point(x, [] { return TraceRecord{"c", "other", "optimizer", "first", 0, "", {}}; });
  }
  EXPECT_EQ(second_out.events.size(), 2u);
  EXPECT_FALSE(tracing());
}

TEST(ClientQueue, DropsRecordsPastItsCapacityAndSaysHowManyBeforeTheNextMessage) {
  ClientQueue q(100);
  const auto msg = [](size_t n) { return std::make_shared<const std::string>(std::string(n, 'x')); };
  EXPECT_EQ(q.push(msg(60), true), ClientQueue::Push::kQueued);
  EXPECT_EQ(q.push(msg(60), true), ClientQueue::Push::kDropped);
  EXPECT_EQ(q.push(msg(60), true), ClientQueue::Push::kDropped);
  EXPECT_EQ((*q.pop())->size(), 60u);
  EXPECT_EQ(q.push(msg(10), true), ClientQueue::Push::kQueued);
  EXPECT_EQ(**q.pop(), dropped_message(2, 2));
  EXPECT_EQ((*q.pop())->size(), 10u);
  EXPECT_FALSE(q.pop().has_value());
  EXPECT_EQ(q.bytes(), 0u);
  // Other messages are kept past the capacity, up to twice it.
  EXPECT_EQ(q.push(msg(90), true), ClientQueue::Push::kQueued);
  EXPECT_EQ(q.push(msg(90), false), ClientQueue::Push::kQueued);
  EXPECT_EQ(q.push(msg(90), false), ClientQueue::Push::kOverflow);
  EXPECT_EQ(q.dropped_total(), 2);
  // Dropped records with nothing after them are announced once the queue runs dry.
  ClientQueue tail(10);
  EXPECT_EQ(tail.push(msg(8), true), ClientQueue::Push::kQueued);
  EXPECT_EQ(tail.push(msg(8), true), ClientQueue::Push::kDropped);
  EXPECT_EQ((*tail.pop())->size(), 8u);
  EXPECT_EQ(**tail.pop(), dropped_message(1, 1));
  EXPECT_FALSE(tail.pop().has_value());
}

TEST(StreamCheck, PassesAStreamWhoseGapsAreAccountedForAndFailsEveryOtherKind) {
  const auto record = [](int64_t rank, int64_t seq) {
    return json({{"type", "record"}, {"rank", rank}, {"seq", seq}, {"kind", "loss"}});
  };
  const auto dropped = [](int64_t count, int64_t total) {
    return json({{"type", "dropped"}, {"count", count}, {"total", total}});
  };
  const auto end = [](int64_t n) { return json({{"type", "end"}, {"records", n}}); };
  const auto check = [](const std::vector<json>& stream) {
    StreamCheck c;
    for (const json& m : stream) {
      if (!c.take(m)) break;
    }
    return c.error;
  };
  EXPECT_EQ(check({record(0, 3), record(0, 4), dropped(2, 2), record(0, 7), dropped(1, 3), end(9)}), "");
  EXPECT_NE(check({record(0, 3), record(0, 5), end(6)}), "");                 // a gap nobody announced
  EXPECT_NE(check({record(0, 3), dropped(2, 2), record(0, 5), end(6)}), "");  // a notice larger than the gap
  EXPECT_NE(check({record(0, 3), record(0, 3), end(4)}), "");                 // a repeat
  EXPECT_NE(check({record(0, 3), dropped(2, 3), record(0, 6), end(7)}), "");  // a total that is not the sum
  EXPECT_NE(check({record(0, 3), record(0, 4), end(9)}), "");                 // records missing at the end
  EXPECT_EQ(check({record(0, 0), record(1, 0), record(1, 1), record(0, 1), end(2)}), "");  // ranks interleave
  EXPECT_NE(check({record(0, 0), record(1, 1), record(1, 0), end(1)}), "");
}

TEST(TraceFile, RecordsAndWholeTensorsReadBack) {
  const std::string folder = ::testing::TempDir() + "/trace-file-" + std::to_string(::getpid());
  std::filesystem::remove_all(folder);
  {
    TracerSink sink(origin(), parse_control_message(R"({"type":"control","points":[
        {"kind":"gradient","compressor":"none","max_elements":2},{"compressor":"stats"}]})"));
    TraceFile file(folder, "", /*tensor_file_bytes=*/50);  // each 64-byte tensor fills a file
    sink.add_output(&file);
    for (int64_t t = 0; t < 3; ++t) {
      sink.write({"w", "gradient", "backward", "first", t, "", {}}, at::arange(8, at::kDouble) * (t + 1));
      sink.write({"loss", "loss", "forward", "forward", t, "", {}}, at::ones({}));
    }
    sink.finish("finished");
  }
  std::ifstream in(folder + "/records.jsonl");
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines.back()["type"], "end");
  std::set<std::string> files;
  for (int64_t t = 0; t < 3; ++t) {
    const json& g = lines[2 * t];
    EXPECT_EQ(g["data"]["values"].size(), 2u);  // capped in the stream, whole in the file
    const SafetensorsFile f = load_safetensors(folder + "/" + g["tensor"]["file"].get<std::string>());
    EXPECT_TRUE(at::equal(f.tensors.at(g["tensor"]["key"].get<std::string>()), at::arange(8, at::kDouble) * (t + 1)));
    files.insert(g["tensor"]["file"].get<std::string>());
    EXPECT_FALSE(lines[2 * t + 1].contains("tensor"));
  }
  EXPECT_EQ(files.size(), 3u);  // 64 bytes each: every tensor filled a file
  std::filesystem::remove_all(folder);
}

// A full disk (records.jsonl on /dev/full: every write fails with ENOSPC) fails the trace naming the
// file, and its files are removed, so that the same --trace-file folder can be used again.
TEST(TraceFile, AWriteThatFailsIsAnErrorNamingTheFileAndLeavesNoFile) {
  const std::string folder = ::testing::TempDir() + "/trace-full-" + std::to_string(::getpid());
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  std::filesystem::create_symlink("/dev/full", folder + "/records.jsonl");
  TracerSink sink(origin(), parse_control_message(R"({"type":"control","points":[{"compressor":"stats"}]})"));
  TraceFile file(folder);
  sink.add_output(&file);
  sink.write({"loss", "loss", "forward", "forward", 0, "", {}}, at::ones({}));
  sink.finish("finished");
  try {
    file.close();
    ADD_FAILURE() << "a trace that could not be written closed without an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(folder + "/records.jsonl: write failed (No space left on device)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(folder));
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace magic
