#include "lib/train/attribution_html.h"

#include "lib/core/strings.h"
#include "lib/train/attribution_text.h"

namespace magic {

HtmlReport attribution_html(const Attribution& a, const ScoreTable& table, const AttributionPage& page) {
  const LmProblem& p = a.problem;
  const MagicResult& r = a.result;
  HtmlReport h;
  h.title = "magic-run: " + page.config_path;
  h.config_json = page.config_json;
  h.timings = {{"training", r.train_seconds}, {"REPLAY", r.replay_seconds}};
  h.facts = {{"training examples", examples_summary(*p.train, page.train_path)},
             {"queries", std::to_string(p.query->num_queries())},
             {"steps", std::to_string(p.step->num_steps())},
             {"model", page.model},
             {"data format", page.data_format},
             {"dtype", page.dtype},
             {"layout", page.layout},
             {"query loss", format_fixed(r.query_loss, 6)},
             {"checkpoints", str_cat(r.checkpoints, " (", format_fixed(r.checkpoint_bytes / 1048576.0, 2),
                                     " MiB), at most ", r.peak_states_held, " states held")},
             {"training smoothness", a.training.steps.empty() ? "not watched (the run resumed after training)"
                                     : a.training_warning     ? "looks non-smooth (the warning above)"
                                                              : "smooth: no loss spike or update-norm jump"},
             {"scores", "dQ/dw at w = 1: negative means up-weighting the example lowers the query loss"}};
  for (const TextDocument& q : p.query_documents) h.queries.emplace_back(q.id, pair_text(q.prompt, q.text));
  h.warning = a.training_warning;
  h.ranking_note = page.ranking_note;
  h.top = page.top;
  h.lds = page.lds;
  if (table.per_query) {
    h.query_ids = table.query_ids;
    h.shown_query = table.query_ids.at(page.shown_query.value_or(0));
  }
  const at::Tensor totals = example_totals(table).to(at::kDouble).contiguous();
  // Per-token scores: scores[i, j] belongs to token j of example i (the weight of its prediction).
  const bool per_token = table.scores.dim() == (table.per_query ? 3 : 2);
  at::Tensor token_scores;
  if (per_token) {
    token_scores = (table.per_query ? table.scores[page.shown_query.value_or(0)] : table.scores).to(at::kDouble);
  }
  for (int64_t i = 0; i < p.train->size(); ++i) {
    const Example& ex = p.train->examples[i];
    HtmlExample e;
    e.id = ex.id;
    e.text = parts_text(example_parts(*p.train, i, *p.tokenizer));  // a chunk row shows its chunk
    if (table.per_query) {
      for (int64_t q = 0; q < totals.size(0); ++q) e.per_query.push_back(totals[q][i].item<double>());
      e.score = e.per_query.at(page.shown_query.value_or(0));
    } else {
      e.score = totals[i].item<double>();
    }
    if (per_token) {
      // The chunk's own tokens (a long document's later chunks start mid-text).
      const at::Tensor ids = p.train->input_ids[i].slice(0, 0, ex.length);
      const at::Tensor prompt = p.train->labels[i].slice(0, 0, ex.length).eq(kIgnoreLabel);
      e.text.clear();
      for (int64_t j = 0; j < ex.length; ++j) {
        std::string token = p.tokenizer->token_text(ids[j].item<int64_t>());
        // A pair's first completion token carries the arrow the rows show (pair_text).
        if (j > 0 && prompt[j - 1].item<bool>() && !prompt[j].item<bool>()) {
          token = pair_text(e.text, token).substr(e.text.size());
        }
        e.text += token;
        e.tokens.push_back(token);
        e.token_scores.push_back(token_scores[i][j].item<double>());
      }
    }
    h.examples.push_back(std::move(e));
  }
  return h;
}

}  // namespace magic
