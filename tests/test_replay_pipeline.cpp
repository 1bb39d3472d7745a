// Pipelined REPLAY (replay_mode.h, replay_pipeline.h) against sequential REPLAY: with one
// intra-op thread on each side it runs every kernel as a one-thread sequential REPLAY does, so
// the scores must be equal bit for bit, for every schedule and from a resumed point; the steps
// really run on another thread with their share of the threads; a failure on either thread
// reaches the caller without a hang; the states it holds stay within the bound the memory
// estimate uses.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "checks/forwarding_step.h"
#include "lib/core/intra_op_threads.h"
#include "lib/core/strings.h"
#include "lib/train/checkpoint_schedule.h"
#include "lib/train/forward_training.h"
#include "lib/train/replay_backward.h"
#include "lib/train/segment_walker.h"
#include "tests/support.h"

namespace magic {
namespace {

// Delegates to a real step and records, for each call, the calling thread and its intra-op
// thread count; optionally fails at one step, and can claim to run collectives.
class ProbedStep : public StepFunction {
 public:
  explicit ProbedStep(const StepFunction& inner) : inner_(inner) {}

  int64_t num_steps() const override { return inner_.num_steps(); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.push_back({std::this_thread::get_id(), at::get_num_threads(), traced});
    }
    if (fail_at && *fail_at == t && fail_traced == traced)
      throw std::runtime_error("planted failure at step " + std::to_string(t));
    return inner_.step(s, t, w, traced);
  }
  TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const override {
    return inner_.gradient(state, t, w, create_graph);
  }
  bool runs_collectives() const override { return collectives; }

  struct Call {
    std::thread::id thread;
    int threads;
    bool traced;
  };
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  std::optional<int64_t> fail_at;
  bool fail_traced = false;
  bool collectives = false;

 private:
  const StepFunction& inner_;
  mutable std::mutex mutex_;
  mutable std::vector<Call> calls_;
};

testing::TinyRun adamw_run(int64_t steps, const std::string& checkpoints) {
  testing::TinyRun r;
  r.optimizer = "adamw";
  r.steps = steps;
  r.checkpoints = checkpoints;
  return r;
}

// Trains (one thread) and takes dQ/dθ_N, ready for ReplayBackward.
struct Trained {
  CheckpointStore store;
  TensorTree dq;
};
Trained train(const LmProblem& p, CheckpointSchedule schedule) {
  IntraOpThreadsScope one(1);
  Trained trained{CheckpointStore(checkpoint_steps(schedule, p.step->num_steps())), {}};
  const TrainState final_state = train_forward(*p.step, p.initial, p.weights, &trained.store, {});
  trained.dq = p.query->gradient(final_state.params);
  return trained;
}

ReplayResult replay_with(const LmProblem& p, const Trained& trained, ReplayMode mode, int threads) {
  IntraOpThreadsScope scope(threads);
  return ReplayBackward(*p.step, trained.store, p.weights, {}, mode).run(trained.dq);
}

TEST(PipelinedReplay, EqualsOneThreadSequentialBitForBitOnEverySchedule) {
  for (auto schedule : {CheckpointSchedule::kAll, CheckpointSchedule::kSqrt, CheckpointSchedule::kLog}) {
    const LmProblem p = testing::tiny_lm_problem(adamw_run(12, checkpoint_schedule_name(schedule)));
    const Trained trained = train(p, schedule);
    const ReplayResult sequential = replay_with(p, trained, ReplayMode::kSequential, 1);
    const ReplayResult pipelined = replay_with(p, trained, ReplayMode::kPipelined, 2);
    const std::string name = checkpoint_schedule_name(schedule);
    ASSERT_GT(sequential.dw.abs().max().item<double>(), 0.0) << name;
    EXPECT_TRUE(at::equal(pipelined.dw, sequential.dw))
        << name << ": max |difference| " << (pipelined.dw - sequential.dw).abs().max().item<double>();
    EXPECT_TRUE(at::equal(pipelined.initial_cotangent.params.flatten(), sequential.initial_cotangent.params.flatten()))
        << name;
    EXPECT_EQ(pipelined.peak_states_held, peak_states_held(schedule, 12, false, ReplayMode::kPipelined)) << name;
    EXPECT_LE(pipelined.observed_states_held, pipelined.peak_states_held) << name;
    EXPECT_EQ(sequential.peak_states_held, peak_states_held(schedule, 12, false)) << name;
  }
}

// A step that counts its traced calls (each a trace of the step's graph).
class CountingStep final : public checks::ForwardingStep {
 public:
  using ForwardingStep::ForwardingStep;
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override {
    if (traced) ++traces;
    return ForwardingStep::step(s, t, w, traced);
  }
  mutable int64_t traces = 0;
};

// backward_through_each with the graph traced again: one more trace a batch but the first, no
// graph kept (each product frees it), the same products bit for bit as with the graph kept.
TEST(PipelinedReplay, TracingAgainForEachBatchGivesTheSameProducts) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(4, "sqrt"));
  ASSERT_FALSE(p.step->runs_collectives());
  const CountingStep step(*p.step);
  const TrainState state = p.initial;
  std::vector<TrainState> lambdas;
  for (int64_t j = 0; j < 3; ++j) lambdas.push_back(step.replay_start(state, p.query->gradient(state.params, j)));
  const auto products = [&](QueryProducts how) {
    step.traces = 0;
    std::vector<StepVjp> out = backward_through_each(step, trace_step(step, state, 1, p.weights), lambdas, how);
    return std::pair{out, step.traces};
  };
  const auto [kept, kept_traces] = products({1, false});
  EXPECT_EQ(kept_traces, 1);
  for (const auto& [how, traces] : {std::pair{QueryProducts{1, true}, 3}, std::pair{QueryProducts{2, true}, 2}}) {
    SCOPED_TRACE(str_cat("batch ", how.batch));
    const auto [again, counted] = products(how);
    EXPECT_EQ(counted, traces);
    ASSERT_EQ(again.size(), kept.size());
    for (size_t j = 0; j < kept.size(); ++j) {
      const at::Tensor a = flatten_state(again[j].cotangent).flatten(), b = flatten_state(kept[j].cotangent).flatten();
      if (how.batch == 1) {
        EXPECT_TRUE(at::equal(a, b)) << "query " << j;
        EXPECT_TRUE(at::equal(again[j].dw, kept[j].dw)) << "query " << j;
      } else {  // batched: sums in another order
        EXPECT_LE((a - b).abs().max().item<double>(), 1e-12 * b.abs().max().item<double>()) << "query " << j;
      }
    }
  }
}

// Per-query REPLAY in one pass (ReplayBackward::run_each): each step traced once, one product per
// query against its own λ, gives each query's REPLAY run alone: bit for bit when the products are
// taken one at a time, to 1e-12 of the largest score when they are batched (two at a time, and all
// at once; the sums inside batched kernels run in another order), sequential and pipelined, with
// the step's graph kept between the products and traced again for each; the observer sees every
// query's product.
TEST(PipelinedReplay, OnePassOverSeveralQueriesEqualsEachQueryAlone) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(12, "sqrt"));
  const Trained trained = train(p, CheckpointSchedule::kSqrt);
  const int64_t queries = p.query->num_queries();
  ASSERT_GE(queries, 3);  // a batch of two leaves a batch of one
  TrainState final_state;
  {
    IntraOpThreadsScope one(1);
    final_state = train_forward(*p.step, p.initial, p.weights, nullptr, {});
  }
  std::vector<TensorTree> dq;
  for (int64_t j = 0; j < queries; ++j) dq.push_back(p.query->gradient(final_state.params, j));
  for (const auto& [mode, threads] : {std::pair{ReplayMode::kSequential, 1}, std::pair{ReplayMode::kPipelined, 2}}) {
    IntraOpThreadsScope scope(threads);
    int64_t products = 0;
    const ReplayBackward replay(
        *p.step, trained.store, p.weights, [&](int64_t, const StepVjp&) { ++products; }, mode);
    std::vector<ReplayResult> alone;
    for (int64_t j = 0; j < queries; ++j) alone.push_back(replay.run(dq[j]));
    for (const auto& [batch, retrace] :
         {std::pair{size_t{1}, false}, std::pair{size_t{2}, false}, std::pair{static_cast<size_t>(queries), false},
          std::pair{size_t{1}, true}, std::pair{size_t{2}, true}}) {
      SCOPED_TRACE(str_cat("batch ", batch, retrace ? ", traced again" : "", ", ", threads, " threads"));
      products = 0;
      const std::vector<ReplayResult> together = replay.run_each(dq, QueryProducts{batch, retrace});
      ASSERT_EQ(static_cast<int64_t>(together.size()), queries);
      EXPECT_EQ(products, queries * 12);
      for (int64_t j = 0; j < queries; ++j) {
        const double largest = alone[j].dw.abs().max().item<double>();
        ASSERT_GT(largest, 0.0);
        const double gap = (together[j].dw - alone[j].dw).abs().max().item<double>();
        if (batch == 1) {
          EXPECT_TRUE(at::equal(together[j].dw, alone[j].dw)) << "query " << j << ": max |difference| " << gap;
        } else {
          EXPECT_LE(gap, 1e-12 * largest) << "query " << j;
        }
        const at::Tensor a = together[j].initial_cotangent.params.flatten();
        const at::Tensor b = alone[j].initial_cotangent.params.flatten();
        if (batch == 1) {
          EXPECT_TRUE(at::equal(a, b)) << "query " << j;
        } else {
          EXPECT_LE((a - b).abs().max().item<double>(), 1e-12 * b.abs().max().item<double>()) << "query " << j;
        }
      }
      // The queries' scores differ: each product took its own λ.
      EXPECT_FALSE(at::allclose(together[0].dw, together[1].dw));
    }
  }
}

// From every segment boundary a REPLAY can be resumed at (replay_journal.h), pipelined and
// sequential agree, and pipelined holds no more states than its bound.
TEST(PipelinedReplay, ResumesFromEverySegmentBoundaryLikeSequential) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(12, "log"));
  IntraOpThreadsScope one(1);
  const Trained trained = train(p, CheckpointSchedule::kLog);
  const CheckpointStore& store = trained.store;
  std::vector<ReplayResume> boundaries;
  const ReplayResult full =
      ReplayBackward(*p.step, store, p.weights).run(trained.dq, nullptr, [&](const ReplayResume& after) {
        boundaries.push_back(after);
      });
  ASSERT_EQ(boundaries.size(), store.steps().size());
  const int64_t bound = store.count() + segment_states_held(store.steps(), 12, ReplayMode::kPipelined);
  IntraOpThreadsScope two(2);
  const ReplayBackward pipelined(*p.step, store, p.weights, {}, ReplayMode::kPipelined);
  for (const ReplayResume& from : boundaries) {
    const ReplayResult r = pipelined.run(trained.dq, &from);
    EXPECT_TRUE(at::equal(r.dw, full.dw)) << "resumed after " << from.segments_done << " segments";
    EXPECT_LE(r.observed_states_held, bound);
    // The last boundary is the finished REPLAY: nothing is recomputed, nothing held.
    EXPECT_EQ(r.peak_states_held, &from == &boundaries.back() ? 0 : bound);
  }
}

// Untraced recomputation and tracing run on one other thread with one intra-op thread; the
// caller takes the products with one; the caller's two are back afterwards.
TEST(PipelinedReplay, StepsRunOnASecondThreadWithHalfTheThreads) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(9, "sqrt"));
  ProbedStep probed(*p.step);
  CheckpointStore store(checkpoint_steps(CheckpointSchedule::kSqrt, 9));
  {
    IntraOpThreadsScope one(1);
    train_forward(probed, p.initial, p.weights, &store, {});
  }
  const size_t training_calls = probed.calls().size();
  IntraOpThreadsScope two(2);
  std::vector<int> caller_threads;
  const ReplayBackward replay(
      probed, store, p.weights, [&](int64_t, const StepVjp&) { caller_threads.push_back(at::get_num_threads()); },
      ReplayMode::kPipelined);
  TensorTree dq = p.query->gradient(p.initial.params);
  replay.run(dq);
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_EQ(caller_threads, std::vector<int>(9, 1));
  const std::vector<ProbedStep::Call> calls = probed.calls();
  std::set<std::thread::id> threads;
  int64_t traced = 0;
  for (size_t i = training_calls; i < calls.size(); ++i) {
    threads.insert(calls[i].thread);
    EXPECT_EQ(calls[i].threads, 1);
    traced += calls[i].traced;
  }
  EXPECT_EQ(traced, 9);
  EXPECT_EQ(static_cast<int64_t>(calls.size() - training_calls),
            9 + (9 - 5));  // all traced; all but 5 checkpoints recomputed
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

// A step that fails on the worker (recomputing or tracing) fails the caller's run with its own
// message; an observer that fails on the caller stops the worker. Neither hangs, and the caller's
// thread count is restored.
TEST(PipelinedReplay, AFailureOnEitherThreadReachesTheCaller) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(9, "sqrt"));
  CheckpointStore store(checkpoint_steps(CheckpointSchedule::kSqrt, 9));
  train_forward(*p.step, p.initial, p.weights, &store, {});
  const TensorTree dq = p.query->gradient(p.initial.params);
  IntraOpThreadsScope two(2);
  for (bool traced : {false, true}) {
    ProbedStep probed(*p.step);
    probed.fail_at = 1;  // recomputed (segment 0 .. 2) and traced
    probed.fail_traced = traced;
    const ReplayBackward replay(probed, store, p.weights, {}, ReplayMode::kPipelined);
    try {
      replay.run(dq);
      ADD_FAILURE() << "a failing step did not fail REPLAY";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "planted failure at step 1");
    }
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  int64_t seen = 0;
  const ReplayBackward stopped(
      *p.step, store, p.weights,
      [&](int64_t t, const StepVjp&) {
        ++seen;
        if (t == 5) throw std::runtime_error("interrupted at step 5");
      },
      ReplayMode::kPipelined);
  EXPECT_THROW(stopped.run(dq), std::runtime_error);
  EXPECT_EQ(seen, 4);  // steps 8, 7, 6, 5
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(PipelinedReplay, RefusesAStepThatRunsCollectives) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(4, "sqrt"));
  ProbedStep probed(*p.step);
  probed.collectives = true;
  CheckpointStore store(checkpoint_steps(CheckpointSchedule::kSqrt, 4));
  EXPECT_THROW(ReplayBackward(probed, store, p.weights, {}, ReplayMode::kPipelined), std::invalid_argument);
  EXPECT_NO_THROW(ReplayBackward(probed, store, p.weights, {}, ReplayMode::kSequential));
  EXPECT_FALSE(p.step->runs_collectives());  // single process
  EXPECT_EQ(choose_replay_mode(false, 2), ReplayMode::kPipelined);
  EXPECT_EQ(choose_replay_mode(true, 2), ReplayMode::kSequential);
  EXPECT_EQ(choose_replay_mode(false, 1), ReplayMode::kSequential);
}

// Driven as eagerly as the pipeline can (recompute whenever it may, trace only when it must), the
// walker yields every step latest first, begins a segment of length L only once the current one has
// at most L/2 states left, and holds the pipelined bound minus the two traced steps it does not count.
TEST(SegmentWalker, EagerRecomputationStaysOneSegmentAhead) {
  const LmProblem p = testing::tiny_lm_problem(adamw_run(12, "log"));
  CheckpointStore store(checkpoint_steps(CheckpointSchedule::kLog, 12));  // 0 6 9 10 11
  train_forward(*p.step, p.initial, p.weights, &store, {});
  SegmentWalker walker(*p.step, store, p.weights, static_cast<int64_t>(store.steps().size()) - 1);
  std::vector<int64_t> order;
  int64_t held = 0;
  while (!walker.done()) {
    if (walker.can_recompute()) {
      walker.recompute_one();
    } else {
      order.push_back(walker.trace().t);
    }
    held = std::max(held, walker.states_held());
  }
  EXPECT_EQ(order, (std::vector<int64_t>{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  // Segments of 6, 3, 1, 1, 1 steps: segment 1 (3) is begun with 1 <= 3 / 2 state of segment 2 left
  // (3 + 1); segment 0 (6) with all 3 <= 6 / 2 of segment 1 (6 + 3), beside 5 checkpoints.
  EXPECT_EQ(held, 5 + 6 + 3);
  EXPECT_EQ(held, store.count() + segment_states_held(store.steps(), 12, ReplayMode::kPipelined) - 2);
  EXPECT_THROW(walker.trace(), std::logic_error);
  EXPECT_THROW(walker.recompute_one(), std::logic_error);
}

}  // namespace
}  // namespace magic
