// A parallelism plan: how each parameter is split across tensor-parallel ranks, by name, in the
// shape of Hugging Face's base_model_tp_plan ({"blocks.*.attn.qkv.weight": colwise, ...}). The
// other mesh axes need no entry: dp and cp replicate every parameter, fsdp shards each
// tensor-parallel piece on dim 0 (docs/magic-check.md, "The parallelism plan").
// The pieces are pure functions of tensors, so a single process can cut and join them.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace magic {

enum class TensorSplit {
  kReplicated,     // every tp rank holds the whole
  kColumnwise,     // dim 0: a column-parallel linear's output features (weight rows and bias)
  kColumnwiseQkv,  // dim 0 as three equal parts q|k|v, each split by heads
  kRowwise,        // dim 1: a row-parallel linear's input features (its bias is replicated)
  kVocabulary,     // dim 0 padded to a multiple of tp (tensor_parallel.h, VocabShard)
};
std::string split_name(TensorSplit split);  // "replicated", "colwise", "colwise_qkv", "rowwise", "vocab"

struct PlanEntry {
  std::string pattern;  // a parameter name; "*" stands for one dotted component (a layer number)
  TensorSplit split;
};
using ParallelPlan = std::vector<PlanEntry>;

bool plan_pattern_matches(const std::string& pattern, const std::string& name);
// The first entry matching `name`; a parameter no entry names is replicated.
TensorSplit split_of(const ParallelPlan& plan, const std::string& name);

// Rank `index`'s piece of `full` of tp pieces (a vocabulary split zero-pads the rows first).
at::Tensor tensor_parallel_piece(const at::Tensor& full, TensorSplit split, int64_t tp, int64_t index);
// The whole from every rank's piece, in rank order; `full_rows`: a vocabulary's real rows.
at::Tensor join_tensor_parallel_pieces(const std::vector<at::Tensor>& pieces, TensorSplit split, int64_t full_rows);

}  // namespace magic
