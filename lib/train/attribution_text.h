// The sentences magic-run says about a run's data and its ranking, shared by the terminal
// summary and the HTML report so that both say the same thing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/data/token_dataset.h"
#include "lib/train/run_config.h"

namespace magic {

// `text` as a row shows it: cut to `width` bytes ("..." marking the cut, which splits no character)
// and on one line, bytes that are not UTF-8 as \xNN (one_line_text, lib/core/utf8.h), as scores.tsv
// shows it.
std::string snippet(const std::string& text, size_t width);

// A prompt/completion pair as one text, "PROMPT ⇒ COMPLETION": the arrow marks where the
// completion begins, with a space beside it only where the text has none (a completion's own
// leading space is that space). Without a prompt, the completion alone.
std::string pair_text(const std::string& prompt, const std::string& completion);

// An example's parts (example_parts, token_dataset.h) as one text: the arrow of pair_text before
// each completion that follows a prompt; a text document's example is its text.
std::string parts_text(const std::vector<TextPart>& parts);

// What the run trained, for its report: "fixtures/models/neox-tiny (2 layers, d_model 32, 4 heads,
// vocab 1000, rotary positions, sequences of 64)", or "GPT from the config (...)" with its
// "model.init" file when one is named.
std::string model_summary(const RunConfig& config, const GptConfig& model);

// "text (field text), fit chunk" or "prompt_completion (fields prompt, completion), fit chunk".
std::string data_format_summary(const RunConfig& config);

// "376 examples from PATH", and when documents were cut or dropped, how many of how many:
// "376 examples from PATH (375 documents, 1 split into chunks of max_len 128)".
std::string examples_summary(const TokenDataset& data, const std::string& path);

// Per-query runs: which query the ranking is for and how to see another, e.g.
// "Ranked by query 0 (Ecc12:11: The words of ...), the first of 8; --query N picks another;
// out/scores.safetensors holds all 8". `chosen`: the user named it with --query; `scores_file`:
// where every query's scores are written ("" when nothing is).
std::string ranking_note(const LmProblem& problem, int64_t query, bool chosen, const std::string& scores_file);

}  // namespace magic
