// Score files written by magic-run: scores.safetensors (the raw tensor, example ids in the
// metadata) and scores.tsv (one row per example: id, score, text (prompt and text for pairs); for
// per-query scores one
// score column per query; for per-token scores the document's sum), valid UTF-8 both, joining
// on id: ids and texts are written as printable_text (lib/core/utf8.h: each byte that is not UTF-8
// as \xNN) in both (the safetensors metadata is JSON, which must be UTF-8); the TSV then escapes
// \\, \t, \n and \r, so unescaping a TSV id gives exactly the string the metadata's JSON decodes
// to. Both are written to a
// temporary name and renamed, so a failed run leaves no half-written file.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/core/utf8.h"

namespace magic {

struct ScoreTable {
  at::Tensor scores;  // [N], [N, T] (per token) or [Q, N] (per query)
  bool per_query = false;
  std::vector<std::string> example_ids;
  std::vector<std::string> example_texts;
  // Prompt/completion runs: each example's prompt part (its tokens that carry no loss), example_texts
  // then holding the completion part; written as a "prompt" column before "text". Empty otherwise.
  std::vector<std::string> example_prompts;
  std::vector<std::string> query_ids;  // per_query only
};

// Per-example totals: [N] (sums tokens), or [Q, N] for per-query tables.
at::Tensor example_totals(const ScoreTable& table);

void write_score_files(const std::string& directory, const ScoreTable& table);

// The scores.safetensors that `path` names, for the tools that read one: the file itself, or the
// one inside magic-run's --out folder. InputError naming `path` where nothing is there, or a folder
// holds none.
std::string score_file_in(const std::string& path);

}  // namespace magic
