// How REPLAY spends the threads it is given.
//   kSequential: one thread recomputes a segment's states, then takes their vector-Jacobian
//                products latest first, with every intra-op thread.
//   kPipelined:  a second thread recomputes states and traces each step (the forward and the
//                gradient kept for differentiation) while the calling thread takes the products
//                of the steps traced before; the intra-op threads are split between the two.
//                It holds the next segment's states while the current one is consumed, and two
//                steps' graphs (replay_pipeline.h).
// Pipelined needs a step that runs no collectives: a rank's collectives must be issued in the same
// order on every rank, which two threads of one rank cannot promise.
#pragma once

namespace magic {

enum class ReplayMode { kSequential, kPipelined };

// kPipelined when there are two intra-op threads or more to split and the step runs no collectives.
inline ReplayMode choose_replay_mode(bool step_runs_collectives, int intra_op_threads) {
  return !step_runs_collectives && intra_op_threads >= 2 ? ReplayMode::kPipelined : ReplayMode::kSequential;
}

// Pipelined REPLAY's split of the intra-op threads: the worker (recomputing, tracing) takes half,
// at least one; the caller (the products) the rest, at least one. The two sides' work is about
// even in matrix products (docs/benchmarks.md, "Why REPLAY/train stays near 3 on two threads").
struct PipelineThreads {
  int caller = 1, worker = 1;
};
inline PipelineThreads pipeline_threads(int intra_op_threads) {
  const int worker = intra_op_threads / 2 > 1 ? intra_op_threads / 2 : 1;
  return {intra_op_threads - worker > 1 ? intra_op_threads - worker : 1, worker};
}

}  // namespace magic
