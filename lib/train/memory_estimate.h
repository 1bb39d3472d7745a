// What a magic-run will hold in memory, estimated from its config before anything is built, so a
// run that cannot fit is refused at once with the figures and the setting that changes them
// (instead of growing until the machine runs out: a billion-step config used to reach 24 GB).
//   states   REPLAY's peak states held (checkpoints plus the longest recomputed segment;
//            checkpoint_schedule.h) × one state (parameters and optimizer state, master dtype)
//   batches  every step's rows, token ids and labels, built before training
//   activations  one REPLAY step's graph: the forward's saved tensors per token,
//            L·(17·d + 3·H·T) + 3·V elements (residual stream, LayerNorms, qkv, MLP hidden; attention
//            scores, mask and probabilities; logits and log-probabilities), times B·T tokens, times 3
//            (the forward, the backward kept for differentiation, the double backward's own
//            temporaries, which reuse the blocks the graph frees as the product consumes it:
//            caching_cpu_allocator.h; 4 was measured with malloc's heap alone).
//            Rows are counted at max_len; a rank of a mesh holds less (counted in full: a bound).
//            Pipelined REPLAY (replay_mode.h) holds more states, and the next step's traced graph
//            (the forward and the kept backward: two thirds of the above) beside the product's.
//   queries  per-query REPLAY in one pass (add_per_query_replay): each query's λ (a state), its
//            ∂Q/∂θ_N and its scores; the step's graph kept for every product but the last, which
//            the products' temporaries can no longer reuse (a quarter of the activations above; none
//            where each step is traced again for each batch of products, --retrace-per-query); and
//            a batch of K products in one backward pass holds K−1 more sets of the double
//            backward's temporaries (half each; measured on the tests' activation-heavy run: 0.45).
//   dump     --dump's records, held until the run ends (estimate_dump_bytes).
// LibTorch itself (about 160 MiB resident) is not counted.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/byte_size.h"
#include "lib/train/checkpoint_plan.h"
#include "lib/train/replay_mode.h"
#include "lib/train/run_config.h"

namespace magic {

struct MemoryEstimate {
  int64_t states = 0;            // states held at the peak
  int64_t state_bytes = 0;       // one state
  int64_t batch_bytes = 0;       // all steps' batches
  int64_t activation_bytes = 0;  // one REPLAY step's graph
  int64_t working_bytes = 0;     // REPLAY's parameter-sized trees (16 of them)
  int64_t traced_bytes = 0;      // pipelined: the next step's traced graph
  int64_t dump_bytes = 0;        // --dump: every record, kept until the run ends
  int64_t queries = 0;           // per-query REPLAY's queries (0: one REPLAY of the query set)
  int64_t query_bytes = 0;       // one query's λ, ∂Q/∂θ_N and scores
  int64_t kept_graph_bytes = 0;  // the step's graph kept between the queries' products
  int64_t query_batch = 1;       // products in one backward pass
  int64_t batched_bytes = 0;     // the batch's extra temporaries

  // Everything but what per-query REPLAY adds per query.
  double total_without_queries() const {
    return static_cast<double>(states) * state_bytes + static_cast<double>(batch_bytes) +
           static_cast<double>(activation_bytes) + static_cast<double>(working_bytes) +
           static_cast<double>(traced_bytes) + static_cast<double>(dump_bytes) + static_cast<double>(kept_graph_bytes) +
           static_cast<double>(batched_bytes);
  }
  double total() const {
    return total_without_queries() + static_cast<double>(queries) * static_cast<double>(query_bytes);
  }
  // "1.2 GiB (45 states of 1.3 MiB, batches 12.0 MiB, a step's activations 747 MiB, working trees
  // 1.3 GiB)", pipelined
  // with ", the next step traced 373 MiB" before the ")", ", 64 queries' cotangents 25.3 MiB, the
  // graph kept between them 178.2 MiB" (", products 4 at a time 712.8 MiB") and ", the dump's records 598 MiB"
  std::string str() const;
};

MemoryEstimate estimate_run_memory(const RunConfig& config, ReplayMode mode = ReplayMode::kSequential);

// One state's bytes: the parameters and the optimizer's state, in the master dtype.
int64_t estimate_state_bytes(const RunConfig& config);

// The config's checkpoint plan (checkpoint_plan.h); a budget's states are its bytes over one
// state's. A budget below the least plan is an InputError naming the key and that least, in bytes.
CheckpointPlan run_checkpoint_plan(const RunConfig& config, ReplayMode mode = ReplayMode::kSequential);

// Per-query REPLAY of `queries` in one pass, `batch` products at a time, with `weights` data
// weights (examples, or examples x positions): what it adds to `e`, as above; `retrace` (each step
// traced again for each batch, QueryProducts) keeps no graph between the products.
void add_per_query_replay(const RunConfig& config, int64_t queries, int64_t batch, int64_t weights, MemoryEstimate& e,
                          bool retrace = false);

// The bytes a run's trace records take (docs/dump-format.md), per step:
//   B·T·(8 + (L·d + V)·c)   input ids, each block's output and the logits (c: compute element)
//   + 4·P·m                  gradient before and after the reduction, update, REPLAY's cotangent
//   + (W + 2)·m              the step's contribution to the scores (W data weights), loss, clip
// and once ∂Q/∂θ (P·m) and the scores (W·Q·m); m is the larger element of compute and master. A
// rank of a mesh holds its shards, rounded up: ⌈B/dp⌉ rows, T padded to a multiple of 2·cp over
// cp, each parameter's ⌈rows/fsdp⌉.
struct DumpShards {
  int64_t dp = 1, cp = 1, fsdp = 1;
};
int64_t estimate_dump_bytes(const RunConfig& config, int64_t weights, int64_t queries, DumpShards shards = {});

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read.
int64_t available_memory_bytes();

// InputError naming the figures, what is available and the config keys that change them when
// `ranks` processes of this estimate exceed `available` (0: unknown, nothing is refused). Ranks
// spawned on one machine each count in full: a conservative bound (fsdp shards the states). The
// way out named is the model's sizes where the model alone cannot fit, the batch and the model's
// where one step's activations cannot, the number of queries (the most that fit) where per-query
// REPLAY's queries are what does not fit, else the schedule (with a dump, running without it first).
void require_memory(const RunConfig& config, const MemoryEstimate& estimate, int64_t available, int64_t ranks = 1);

}  // namespace magic
