// The run replay_bench and step_cost measure (fixed, fp64): GPT with 2 layers, d_model 64,
// 4 heads, 128-token sequences, batch 8, AdamW with warmup + cosine, on
// fixtures/text/proverbs.jsonl, N steps with the given checkpoint schedule.
#pragma once

#include <cstdint>
#include <string>

#include "lib/train/run_config.h"

namespace magic::bench {

inline RunConfig replay_bench_config(int64_t steps, const std::string& schedule, const std::string& fixtures) {
  nlohmann::json config = {
      {"seed", 0},
      {"dtype", "fp64"},
      {"model", {{"vocab", 257}, {"d_model", 64}, {"n_layers", 2}, {"n_heads", 4}, {"max_len", 128}}},
      {"data", {{"train", "text/proverbs.jsonl"}, {"queries", "text/queries.jsonl"}}},
      {"training", {{"steps", steps}, {"batch_size", 8}, {"checkpoints", schedule}}},
      {"optimizer",
       {{"name", "adamw"},
        {"lr", 1e-3},
        {"weight_decay", 0.01},
        {"eps_root", 1e-12},
        {"schedule", {{"name", "cosine"}, {"warmup_fraction", 0.1}}}}},
  };
  return RunConfig::from_json(config, "replay_bench", fixtures);
}

}  // namespace magic::bench
