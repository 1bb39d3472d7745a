// Whether a training run learned enough for its scores to be about what the examples say. A model
// that learned little beyond how often each token occurs has a loss near the unigram entropy of
// its training tokens (the loss of predicting every token from its frequency alone), and its
// scores rank examples by how they teach those frequencies: the most helpful examples of a query
// need not share its topic. magic-run warns ("the model learned little beyond token frequencies",
// or "training barely moved the model"), naming the figures and what to change. The criterion
// (docs/magic-run.md), with H the unigram entropy, every loss in nats a token:
//   near the unigram entropy: the query loss, or the final training loss, is above (1 - kUnigramMargin) × H;
//                             judged only where the training tokens sample their vocabulary well: at
//                             most kMostSeenOnce of them are of a kind seen once (Good-Turing's estimate
//                             of the chance of a kind not seen; a model folder's large vocabulary on a
//                             small data set is not: there H is far below a frequency table's loss on
//                             new text, and a pretrained model's loss above it says nothing);
//   barely trained:           the final training loss is above (1 - kLeastDrop) × step 1's training loss.
// The final training loss is the mean over the watched steps of the run's last quarter (one
// batch's loss is noisy). A figure a run did not see (a resumed run did not watch step 1) is not judged.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

#include "lib/train/training_health.h"

namespace magic {

inline constexpr double kUnigramMargin = 0.1;
inline constexpr double kLeastDrop = 0.02;
inline constexpr double kFinalFraction = 0.25;
inline constexpr double kMostSeenOnce = 0.05;

// The empirical distribution of next-token targets: labels[:, 1:] other than -100 (the tokens the
// training loss predicts).
struct Unigram {
  double entropy = 0;          // nats a token
  double seen_once_share = 0;  // the share of the tokens whose kind occurs once
};
Unigram unigram_of(const at::Tensor& labels);

struct LearningFigures {
  double unigram_entropy = 0;
  double seen_once_share = 0;
  std::optional<double> query_loss;
  std::optional<double> first_loss;         // step 1's training loss
  std::optional<double> final_loss;         // the mean over final_first..final_last
  int64_t final_first = 0, final_last = 0;  // 1-based steps
  bool built_in_model = true;               // the advice may name model.d_model
};

// The figures of a run: `losses_per_token` are trace.losses in nats a token (the whole batch's,
// summed over ranks on a distributed run); empty: the training loss is not judged.
LearningFigures learning_figures(const TrainingTrace& trace, const std::vector<double>& losses_per_token,
                                 const Unigram& unigram, std::optional<double> query_loss);

struct LearningVerdict {
  bool unigram_judged = false;  // the tokens sample their vocabulary well enough for H to mean a frequency table's loss
  bool query_near_unigram = false, final_near_unigram = false, barely_trained = false;
  bool learned() const { return !query_near_unigram && !final_near_unigram && !barely_trained; }
};

LearningVerdict judge_learning(const LearningFigures& figures);

// One line for a person: the figures, what they mean and what to change; nullopt when learned.
std::optional<std::string> learned_little_warning(const LearningFigures& figures);

// The figures on one line, for the report's Run table ("query loss 2.452, ...: learned beyond token frequencies").
std::string learning_summary(const LearningFigures& figures);

}  // namespace magic
