// Pipeline schedules (lib/distributed/parallel/pipeline_schedule.h):
//   - small cases worked out by hand (GPipe; 1F1B's warm-up, steady state and cool-down; the
//     interleaved order Megatron documents);
//   - every stage's list runs each (micro-batch, chunk) forward once and backward once after it;
//   - the stages' lists fit together: a simulation of ranks whose sends never wait and whose
//     receives do (a forward waits for the previous chunk's forward of its micro-batch, a
//     backward for the next chunk's backward) finishes every list, over a grid of pp, vpp and mb;
//   - 1F1B bounds the micro-batches in flight (forward done, backward not) on stage s by pp − s;
//   - what cannot run is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "lib/distributed/parallel/pipeline_schedule.h"
#include "tests/support.h"

namespace magic::dist {
namespace {

using Kind = PipelineSchedule;
constexpr Kind kGpipe = PipelineSchedule::kGpipe;
constexpr Kind k1f1b = PipelineSchedule::kOneForwardOneBackward;

// "F0 F1 B0 ..." (micro-batch; with chunks "F0.1": micro-batch 0 of chunk 1).
std::string text(const std::vector<PipelineAction>& actions, bool chunks = false) {
  std::string out;
  for (const auto& a : actions) {
    out += (out.empty() ? "" : " ") + std::string(a.forward ? "F" : "B") + std::to_string(a.micro_batch);
    if (chunks) out += "." + std::to_string(a.chunk);
  }
  return out;
}

TEST(PipelineSchedule, SmallSchedulesAreTheOnesWorkedOutByHand) {
  EXPECT_EQ(text(pipeline_actions(kGpipe, 2, 1, 0, 3)), "F0 F1 F2 B2 B1 B0");
  // 1F1B, pp = 3, mb = 4: stage 0 warms up with 2 forwards, stage 1 with 1, stage 2 with none.
  EXPECT_EQ(text(pipeline_actions(k1f1b, 3, 1, 0, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(text(pipeline_actions(k1f1b, 3, 1, 1, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(text(pipeline_actions(k1f1b, 3, 1, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
  // Interleaved, pp = 2, vpp = 2, mb = 2: stage 1 warms up with (2−1−1)·2 + (2−1)·2 = 2 forwards
  // (micro-batches 0 and 1 of chunk 0), then forwards go on to chunk 1 while backwards start
  // from chunk 1; stage 0 warms up with 4, all it has.
  EXPECT_EQ(text(pipeline_actions(k1f1b, 2, 2, 1, 2), true), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0");
  EXPECT_EQ(text(pipeline_actions(k1f1b, 2, 2, 0, 2), true), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

// Runs every stage's list as ranks would, in rounds: a stage takes its next action when the
// action it receives from has run (sends never wait). Returns the actions run (fewer than all: the
// lists deadlock) and the most micro-batches in flight on any stage s beyond pp − s.
struct Simulated {
  int64_t ran = 0;
  int64_t in_flight_excess = 0;
};

Simulated simulate(const std::vector<std::vector<PipelineAction>>& lists, int64_t vpp) {
  const auto pp = static_cast<int64_t>(lists.size());
  const int64_t chunks = pp * vpp;
  std::set<std::tuple<bool, int64_t, int64_t>> done;  // (forward, micro-batch, global chunk)
  std::vector<size_t> next(lists.size(), 0);
  std::vector<int64_t> in_flight(lists.size(), 0);
  Simulated out;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < pp; ++s) {
      const auto u = static_cast<size_t>(s);
      if (next[u] == lists[u].size()) continue;
      const PipelineAction& a = lists[u][next[u]];
      const int64_t c = a.chunk * pp + s;
      const bool ready = a.forward ? (c == 0 || done.count({true, a.micro_batch, c - 1}) > 0)
                                   : done.count({true, a.micro_batch, c}) > 0 &&
                                         (c == chunks - 1 || done.count({false, a.micro_batch, c + 1}) > 0);
      if (!ready) continue;
      done.insert({a.forward, a.micro_batch, c});
      in_flight[u] += a.forward ? 1 : -1;
      out.in_flight_excess = std::max(out.in_flight_excess, in_flight[u] - (pp - s));
      ++next[u];
      ++out.ran;
      progress = true;
    }
  }
  return out;
}

std::vector<std::vector<PipelineAction>> all_lists(Kind kind, int64_t pp, int64_t vpp, int64_t mb) {
  std::vector<std::vector<PipelineAction>> lists;
  for (int64_t s = 0; s < pp; ++s) lists.push_back(pipeline_actions(kind, pp, vpp, s, mb));
  return lists;
}

TEST(PipelineSchedule, EveryStagesListFitsTheOthersAndRunsEachPassOnce) {
  int64_t cases = 0;
  for (Kind kind : {kGpipe, k1f1b}) {
    for (int64_t pp = 1; pp <= 4; ++pp) {
      for (int64_t vpp = 1; vpp <= (pp > 1 ? 3 : 1); ++vpp) {
        for (int64_t mb = 1; mb <= 8; ++mb) {
          if (kind == k1f1b && (mb < pp || (vpp > 1 && mb % pp != 0))) continue;
          SCOPED_TRACE(::testing::Message() << schedule_name(kind) << " pp=" << pp << " vpp=" << vpp << " mb=" << mb);
          for (int64_t s = 0; s < pp; ++s) {
            const auto list = pipeline_actions(kind, pp, vpp, s, mb);
            std::map<std::pair<int64_t, int64_t>, int> forwards, backwards;
            for (const auto& a : list) {
              auto key = std::make_pair(a.micro_batch, a.chunk);
              if (a.forward) {
                ++forwards[key];
              } else {
                EXPECT_EQ(forwards[key], 1) << "a backward before its forward";
                ++backwards[key];
              }
            }
            EXPECT_EQ(static_cast<int64_t>(forwards.size()), mb * vpp);
            EXPECT_EQ(static_cast<int64_t>(backwards.size()), mb * vpp);
            for (const auto& [key, n] : backwards) EXPECT_EQ(n, 1);
          }
          const Simulated run = simulate(all_lists(kind, pp, vpp, mb), vpp);
          EXPECT_EQ(run.ran, 2 * mb * vpp * pp) << "deadlock";
          if (kind == k1f1b && vpp == 1) {
            EXPECT_LE(run.in_flight_excess, 0) << "more in flight than 1F1B allows";
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 122);  // 80 GPipe and 42 1F1B cases of the grid
}

// Planted lists the simulation must reject: stage 1 of 1F1B running a backward before the
// forward of the micro-batch it needs (a deadlock), and GPipe's list, which holds every
// micro-batch in flight at once, judged against 1F1B's bound.
TEST(PipelineSchedule, TheSimulationSeesADeadlockAndAPipeTooFull) {
  auto lists = all_lists(k1f1b, 3, 1, 4);
  std::swap(lists[1][0], lists[1][2]);  // stage 1: B0 F1 F0 ...
  EXPECT_LT(simulate(lists, 1).ran, 2 * 4 * 3);
  EXPECT_GT(simulate(all_lists(kGpipe, 3, 1, 6), 1).in_flight_excess, 0);
}

TEST(PipelineSchedule, WhatCannotRunIsRefusedByName) {
  auto refusal = [](Kind kind, int64_t pp, int64_t vpp, int64_t mb) {
    return testing::input_error_of([&] { validate_pipeline_schedule(kind, pp, vpp, mb, "--topology"); });
  };
  EXPECT_EQ(refusal(k1f1b, 4, 1, 3),
            "--topology: mb=3 micro-batches are fewer than the pp=4 stages, which 1F1B needs to fill the pipeline "
            "(use more micro-batches or gpipe)");
  EXPECT_EQ(refusal(kGpipe, 4, 1, 3), "");
  EXPECT_EQ(refusal(k1f1b, 2, 2, 3),
            "--topology: mb=3 is not a multiple of pp=2, which the interleaved 1F1B schedule (vpp=2) needs");
  EXPECT_EQ(refusal(kGpipe, 1, 2, 2),
            "--topology: vpp=2 without pp: virtual stages interleave the chunks of pp > 1 stages");
  EXPECT_EQ(refusal(kGpipe, 2, 1, 0), "--topology: pp=2, vpp=1, mb=0: expected each >= 1");
  EXPECT_EQ(testing::input_error_of([] { parse_pipeline_schedule("1F1B\x1b[2J", "--schedule"); }),
            "--schedule: unknown schedule '1F1B\\x1B[2J'; expected gpipe or 1f1b");
  EXPECT_EQ(parse_pipeline_schedule("1f1b", "x"), k1f1b);
}

}  // namespace
}  // namespace magic::dist
