#include "lib/model/parallel_plan.h"

#include "lib/core/strings.h"
#include "lib/model/tensor_parallel.h"

namespace magic {

std::string split_name(TensorSplit split) {
  switch (split) {
    case TensorSplit::kReplicated:
      return "replicated";
    case TensorSplit::kColumnwise:
      return "colwise";
    case TensorSplit::kColumnwiseQkv:
      return "colwise_qkv";
    case TensorSplit::kRowwise:
      return "rowwise";
    case TensorSplit::kVocabulary:
      return "vocab";
  }
  return "?";
}

bool plan_pattern_matches(const std::string& pattern, const std::string& name) {
  const std::vector<std::string> want = split(pattern, '.'), have = split(name, '.');
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != "*" && want[i] != have[i]) return false;
  }
  return true;
}

TensorSplit split_of(const ParallelPlan& plan, const std::string& name) {
  for (const PlanEntry& entry : plan) {
    if (plan_pattern_matches(entry.pattern, name)) return entry.split;
  }
  return TensorSplit::kReplicated;
}

namespace {

at::Tensor even_piece(const at::Tensor& t, int64_t dim, int64_t tp, int64_t index) {
  if (t.size(dim) % tp != 0) {
    throw std::invalid_argument(
        str_cat("tensor parallel: dim ", dim, " of ", t.size(dim), " does not split ", tp, " ways"));
  }
  const int64_t n = t.size(dim) / tp;
  return t.narrow(dim, index * n, n);
}

}  // namespace

at::Tensor tensor_parallel_piece(const at::Tensor& full, TensorSplit split, int64_t tp, int64_t index) {
  switch (split) {
    case TensorSplit::kReplicated:
      return full.clone();
    case TensorSplit::kColumnwise:
      return even_piece(full, 0, tp, index).clone();
    case TensorSplit::kRowwise:
      return even_piece(full, 1, tp, index).clone();
    case TensorSplit::kColumnwiseQkv: {
      std::vector<at::Tensor> parts;
      for (const at::Tensor& part : full.chunk(3, 0)) parts.push_back(even_piece(part, 0, tp, index));
      return at::cat(parts, 0);
    }
    case TensorSplit::kVocabulary: {
      const VocabShard shard = vocab_shard(full.size(0), tp, index);
      std::vector<int64_t> shape = full.sizes().vec();
      shape[0] = shard.local;
      at::Tensor piece = at::zeros(shape, full.options());
      if (shard.real > 0) piece.narrow(0, 0, shard.real).copy_(full.narrow(0, shard.begin, shard.real));
      return piece;
    }
  }
  throw std::logic_error("tensor_parallel_piece: unknown split");
}

at::Tensor join_tensor_parallel_pieces(const std::vector<at::Tensor>& pieces, TensorSplit split, int64_t full_rows) {
  switch (split) {
    case TensorSplit::kReplicated:
      return pieces.front().clone();
    case TensorSplit::kColumnwise:
      return at::cat(pieces, 0);
    case TensorSplit::kRowwise:
      return at::cat(pieces, 1);
    case TensorSplit::kColumnwiseQkv: {
      std::vector<at::Tensor> q, k, v;
      for (const at::Tensor& piece : pieces) {
        auto parts = piece.chunk(3, 0);
        q.push_back(parts[0]);
        k.push_back(parts[1]);
        v.push_back(parts[2]);
      }
      return at::cat({at::cat(q, 0), at::cat(k, 0), at::cat(v, 0)}, 0);
    }
    case TensorSplit::kVocabulary:
      return at::cat(pieces, 0).narrow(0, 0, full_rows).clone();
  }
  throw std::logic_error("join_tensor_parallel_pieces: unknown split");
}

}  // namespace magic
