#include "lib/train/learning_health.h"

#include <cmath>

#include "lib/core/strings.h"
#include "lib/model/lm_loss.h"

namespace magic {

Unigram unigram_of(const at::Tensor& labels) {
  const at::Tensor targets = labels.slice(1, 1).reshape(-1);
  const at::Tensor kept = targets.masked_select(targets.ne(kIgnoreLabel));
  if (kept.numel() == 0) return {};
  const at::Tensor counts = kept.bincount().to(at::kDouble);
  const double n = static_cast<double>(kept.numel());
  const at::Tensor p = counts.masked_select(counts.gt(0)) / n;
  return {-(p * p.log()).sum().item<double>(), counts.eq(1).sum().item<double>() / n};
}

LearningFigures learning_figures(const TrainingTrace& trace, const std::vector<double>& losses_per_token,
                                 const Unigram& unigram, std::optional<double> query_loss) {
  LearningFigures f;
  f.unigram_entropy = unigram.entropy;
  f.seen_once_share = unigram.seen_once_share;
  f.query_loss = query_loss;
  if (losses_per_token.empty()) return f;
  if (!trace.steps.empty() && trace.steps.front() == 0) f.first_loss = losses_per_token.front();
  const int64_t window =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kFinalFraction * static_cast<double>(trace.total_steps))));
  double sum = 0;
  int64_t count = 0;
  for (size_t k = 0; k < trace.steps.size(); ++k) {
    if (trace.steps[k] < trace.total_steps - window) continue;
    if (count == 0) f.final_first = trace.steps[k] + 1;
    f.final_last = trace.steps[k] + 1;
    sum += losses_per_token[k];
    ++count;
  }
  if (count > 0) f.final_loss = sum / static_cast<double>(count);
  return f;
}

LearningVerdict judge_learning(const LearningFigures& f) {
  const double near = (1 - kUnigramMargin) * f.unigram_entropy;
  LearningVerdict v;
  v.unigram_judged = f.seen_once_share <= kMostSeenOnce;
  v.query_near_unigram = v.unigram_judged && f.query_loss && *f.query_loss > near;
  v.final_near_unigram = v.unigram_judged && f.final_loss && *f.final_loss > near;
  v.barely_trained = f.final_loss && f.first_loss && *f.final_loss > (1 - kLeastDrop) * *f.first_loss;
  return v;
}

namespace {

std::string nats(double v) {
  return format_fixed(v, 3);
}

std::string final_loss_named(const LearningFigures& f) {
  const std::string steps = f.final_first == f.final_last ? str_cat("step ", f.final_last)
                                                          : str_cat("steps ", f.final_first, "-", f.final_last);
  return str_cat("the final training loss ", nats(*f.final_loss), " (mean of ", steps, ")");
}

}  // namespace

std::optional<std::string> learned_little_warning(const LearningFigures& f) {
  const LearningVerdict v = judge_learning(f);
  if (v.learned()) return std::nullopt;
  std::vector<std::string> seen;
  if (v.query_near_unigram || v.final_near_unigram) {
    std::vector<std::string> losses;
    if (v.query_near_unigram) losses.push_back(str_cat("the query loss ", nats(*f.query_loss)));
    if (v.final_near_unigram) losses.push_back(final_loss_named(f));
    seen.push_back(str_cat(join(losses, " and "), " nats a token ", losses.size() > 1 ? "are" : "is", " above ",
                           format_fixed(1 - kUnigramMargin, 1), "x the unigram entropy of the training tokens, ",
                           nats(f.unigram_entropy), " (the loss of predicting each token by its frequency alone)",
                           f.first_loss ? str_cat("; step 1's loss was ", nats(*f.first_loss)) : ""));
  }
  if (v.barely_trained) {
    seen.push_back(str_cat(v.final_near_unigram ? "the final training loss" : final_loss_named(f), " is less than ",
                           format_fixed(100 * kLeastDrop, 0), "% below step 1's ", nats(*f.first_loss)));
  }
  const bool near_unigram = v.query_near_unigram || v.final_near_unigram;
  const std::string title =
      near_unigram ? "the model learned little beyond token frequencies" : "training barely moved the model";
  const std::string meaning = near_unigram ? "the scores rank examples mostly by how they teach those frequencies, "
                                             "not by what the examples say"
                                           : "the scores describe a run that hardly left its initial weights";
  const std::string wider = f.built_in_model ? ", or a wider model (model.d_model)" : "";
  return str_cat("warning: ", title, ": ", join(seen, "; "), "; ", meaning,
                 "; train longer (training.steps), at a larger learning rate (optimizer.lr)", wider,
                 " (docs/magic-run.md, \"Settings that give meaningful scores\")");
}

std::string learning_summary(const LearningFigures& f) {
  std::vector<std::string> figures;
  if (f.query_loss) figures.push_back(str_cat("query loss ", nats(*f.query_loss)));
  if (f.final_loss) figures.push_back(final_loss_named(f).substr(4));  // without "the "
  if (f.first_loss) figures.push_back(str_cat("step 1's ", nats(*f.first_loss)));
  const LearningVerdict v = judge_learning(f);
  figures.push_back(str_cat("unigram entropy of the training tokens ", nats(f.unigram_entropy),
                            v.unigram_judged ? ""
                                             : str_cat(" (not compared: ", format_fixed(100 * f.seen_once_share, 1),
                                                       "% of the tokens are of a kind seen once)")));
  const std::string verdict = !v.learned()       ? (v.query_near_unigram || v.final_near_unigram
                                                        ? "learned little beyond token frequencies (the warning above)"
                                                        : "training barely moved the model (the warning above)")
                              : v.unigram_judged ? "learned beyond token frequencies"
                                                 : "trained: its loss fell by 2% or more";
  return str_cat(join(figures, ", "), " (nats a token): ", verdict);
}

}  // namespace magic
