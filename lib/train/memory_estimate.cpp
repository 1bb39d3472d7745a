#include "lib/train/memory_estimate.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/train/binomial_checkpointing.h"

namespace magic {

std::string MemoryEstimate::str() const {
  return str_cat(
      format_bytes(total()), " (", states, " states of ", format_bytes(static_cast<double>(state_bytes)), ", batches ",
      format_bytes(static_cast<double>(batch_bytes)), ", a step's activations ",
      format_bytes(static_cast<double>(activation_bytes)), ", working trees ",
      format_bytes(static_cast<double>(working_bytes)),
      traced_bytes > 0 ? ", the next step traced " + format_bytes(static_cast<double>(traced_bytes)) : "",
      queries > 0 ? str_cat(", ", queries, " queries' cotangents ",
                            format_bytes(static_cast<double>(queries) * static_cast<double>(query_bytes)))
                  : "",
      kept_graph_bytes > 0 ? ", the graph kept between them " + format_bytes(static_cast<double>(kept_graph_bytes))
                           : "",
      batched_bytes > 0
          ? str_cat(", products ", query_batch, " at a time ", format_bytes(static_cast<double>(batched_bytes)))
          : "",
      dump_bytes > 0 ? ", the dump's records " + format_bytes(static_cast<double>(dump_bytes)) : "", ")");
}

namespace {
constexpr int64_t kWorkingTrees = 16;
}  // namespace

int64_t estimate_state_bytes(const RunConfig& c) {
  const double parameters = gpt_parameter_count(c.model);
  const int64_t element = static_cast<int64_t>(c10::elementSize(c.precision.master));
  // Adam keeps m and v beside the parameters; SGD with momentum one trace.
  const int64_t copies = c.optimizer.name == "sgd" ? (c.optimizer.momentum != 0.0 ? 2 : 1) : 3;
  return static_cast<int64_t>(std::min(parameters * static_cast<double>(element * copies), 9.0e18));
}

CheckpointPlan run_checkpoint_plan(const RunConfig& c, ReplayMode mode) {
  const bool spilled = c.spill_dir.has_value();
  int64_t states = 0;
  if (c.checkpoints == CheckpointSchedule::kBudget) {
    const int64_t state = std::max<int64_t>(estimate_state_bytes(c), 1);
    states = c.checkpoint_budget / state;
    const int64_t least = least_budget_states(spilled);
    if (states < least) {
      throw InputError(str_cat(c.where("training.checkpoints.budget"), ": ",
                               format_bytes(static_cast<double>(c.checkpoint_budget)), " holds ", states, " states of ",
                               format_bytes(static_cast<double>(state)), "; a budget needs at least ", least, " (",
                               format_bytes(static_cast<double>(least * state)), "): ", spilled ? "" : "a checkpoint, ",
                               "a segment's first state and the working state"));
    }
  }
  return plan_checkpoints(c.checkpoints, c.steps, states, spilled, mode);
}

MemoryEstimate estimate_run_memory(const RunConfig& c, ReplayMode mode) {
  MemoryEstimate e;
  const double parameters = gpt_parameter_count(c.model);
  const int64_t element = static_cast<int64_t>(c10::elementSize(c.precision.master));
  e.state_bytes = estimate_state_bytes(c);
  e.states = run_checkpoint_plan(c, mode).states;
  // Per step: row indices, token ids and labels (int64), data weights (per token at most).
  const double per_step = static_cast<double>(c.batch_size) * (8.0 + 16.0 * c.model.max_len);
  e.batch_bytes = static_cast<int64_t>(std::min(per_step * static_cast<double>(c.steps), 9.0e18));
  const GptConfig& m = c.model;
  // A query reads (n + 1)/2n of the keys on average where attention runs in n causal blocks
  // (gpt.h); a context-parallel rank reads them all, but its estimate counts every rank's tokens.
  const double blocks = static_cast<double>(causal_blocks(m.max_len));
  const double keys = static_cast<double>(m.max_len) * (blocks + 1.0) / (2.0 * blocks);
  const double per_token = static_cast<double>(m.n_layers) * (17.0 * m.d_model + 3.0 * m.n_heads * keys) +
                           3.0 * static_cast<double>(m.vocab);
  const double tokens = static_cast<double>(c.batch_size) * static_cast<double>(m.max_len);
  const auto compute = static_cast<double>(c10::elementSize(c.precision.compute));
  e.activation_bytes = static_cast<int64_t>(std::min(3.0 * per_token * tokens * compute, 9.0e18));
  if (mode == ReplayMode::kPipelined) e.traced_bytes = e.activation_bytes * 2 / 3;
  // REPLAY holds parameter-sized trees beside the states: the step's gradient and its products,
  // the cotangents of θ and of the optimizer state, dQ/dθ. Fitted where they dominate (a
  // Pythia-14m-shaped model, 14M parameters in fp64: 2.97 GB peak with 1 query and 4 rows, of
  // which states and activations explain 1.1 GiB and the process itself ~0.3 GB): about 16 trees.
  e.working_bytes = static_cast<int64_t>(std::min(kWorkingTrees * parameters * static_cast<double>(element), 9.0e18));
  return e;
}

void add_per_query_replay(const RunConfig& c, int64_t queries, int64_t batch, int64_t weights, MemoryEstimate& e,
                          bool retrace) {
  const double element = static_cast<double>(c10::elementSize(c.precision.master));
  e.queries = queries;
  e.query_bytes = static_cast<int64_t>(std::min(
      static_cast<double>(e.state_bytes) + (gpt_parameter_count(c.model) + static_cast<double>(weights)) * element,
      9.0e18));
  // A kept graph cannot be freed as the product consumes it: what a lone product frees early stays
  // while the rest of it runs. Measured above a lone product's peak: the demo's (426.6 MiB of
  // estimated activations) 76 MiB, the tests' per-query run (213.3) about 29; a quarter bounds both.
  e.kept_graph_bytes = queries > 1 && !retrace ? e.activation_bytes / 4 : 0;
  e.query_batch = std::max<int64_t>(1, std::min(batch, queries));
  e.batched_bytes = (e.query_batch - 1) * (e.activation_bytes / 2);
}

int64_t estimate_dump_bytes(const RunConfig& c, int64_t weights, int64_t queries, DumpShards shards) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const GptConfig& m = c.model;
  const double parameters = gpt_parameter_count(m, shards.fsdp);  // a rank's dim-0 shard of each, rounded up
  const auto compute = static_cast<double>(c10::elementSize(c.precision.compute));
  const auto element = std::max(compute, static_cast<double>(c10::elementSize(c.precision.master)));
  const double positions = static_cast<double>(ceil_div(c.batch_size, shards.dp)) *
                           static_cast<double>(ceil_div(m.max_len, 2 * shards.cp) * 2);
  const double per_step = positions * (8.0 + (static_cast<double>(m.n_layers) * m.d_model + m.vocab) * compute) +
                          (4.0 * parameters + static_cast<double>(weights) + 2.0) * element;
  const double once = (parameters + static_cast<double>(weights) * queries) * element;
  return static_cast<int64_t>(std::min(per_step * static_cast<double>(c.steps) + once, 9.0e18));
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

namespace {

// The most queries whose cotangents fit beside the rest of the estimate.
int64_t most_queries_that_fit(const MemoryEstimate& e, int64_t available, int64_t ranks) {
  const double room = static_cast<double>(available) / static_cast<double>(ranks) - e.total_without_queries();
  return e.query_bytes > 0 ? static_cast<int64_t>(std::max(0.0, room / static_cast<double>(e.query_bytes))) : 0;
}

}  // namespace

void require_memory(const RunConfig& c, const MemoryEstimate& e, int64_t available, int64_t ranks) {
  const auto fits = [&](double bytes) { return bytes * static_cast<double>(ranks) <= static_cast<double>(available); };
  if (available <= 0 || fits(e.total())) return;
  // What no schedule changes: one state beside REPLAY's working trees, and one step's graph.
  const double model = static_cast<double>(e.state_bytes) + static_cast<double>(e.working_bytes);
  const double step = static_cast<double>(e.activation_bytes);
  const std::string way_out =
      !fits(model) ? str_cat("the model alone needs ", format_bytes(model), " (a state and REPLAY's working trees): ",
                             c.model_folder ? "a smaller model than " + *c.model_folder
                                            : "lower model.d_model, model.n_layers, model.vocab or model.max_len")
      : !fits(model + step) ? str_cat("one step's activations need ", format_bytes(step),
                                      ": lower training.batch_size, model.max_len, model.n_layers or model.d_model")
      : e.kept_graph_bytes > 0 && fits(e.total() - static_cast<double>(e.kept_graph_bytes))
          ? str_cat("per-query REPLAY keeps each step's graph between the queries' products (",
                    format_bytes(static_cast<double>(e.kept_graph_bytes)),
                    "): add --retrace-per-query to trace each step again for every query instead (slower)")
      : e.queries > 1 && fits(e.total_without_queries() + static_cast<double>(e.query_bytes))
          ? str_cat("per-query REPLAY holds each query's cotangents (",
                    format_bytes(static_cast<double>(e.query_bytes)), "): at most ",
                    most_queries_that_fit(e, available, ranks), " of the ", e.queries, " queries in ", c.query_path,
                    " fit; split the query file", e.query_batch > 1 ? " or lower --query-batch" : "")
          : str_cat(e.dump_bytes > 0 ? "run without --dump (its records are held until the run ends), " : "",
                    "lower training.steps or training.batch_size, set a memory budget for REPLAY's states (",
                    "\"checkpoints\": {\"budget\": \"256MiB\"}: the fewest recomputations within it), or set ",
                    "training.spill_dir to keep checkpoints on disk");
  throw InputError(str_cat(c.where(), ": training.steps ", c.steps, " with ",
                           plan_summary(c.checkpoints, run_checkpoint_plan(c), c.checkpoint_budget), " needs about ",
                           e.str(), ranks > 1 ? str_cat(" per rank, ", ranks, " ranks on this machine") : "",
                           ", above the ", format_bytes(static_cast<double>(available)), " available; ", way_out));
}

}  // namespace magic
