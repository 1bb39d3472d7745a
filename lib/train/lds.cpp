#include "lib/train/lds.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "lib/compare/correlation.h"
#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/forward_training.h"
#include "lib/train/progress_meter.h"

namespace magic {
namespace {

// The `p` quantile of finite values (nearest rank); NaN when there are none.
double quantile(std::vector<double> values, double p) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const auto k = static_cast<size_t>(std::clamp(std::ceil(p * values.size()) - 1, 0.0, values.size() - 1.0));
  return values[k];
}

// Spearman of every column of a [S, C] pair.
std::vector<double> column_spearman(const at::Tensor& actual, const at::Tensor& predicted) {
  std::vector<double> out;
  for (int64_t c = 0; c < actual.size(1); ++c) {
    out.push_back(spearman(actual.select(1, c).contiguous(), predicted.select(1, c).contiguous()));
  }
  return out;
}

double mean_of(const std::vector<double>& values, int64_t from) {
  double sum = 0;
  for (size_t i = from; i < values.size(); ++i) sum += values[i];
  return sum / static_cast<double>(values.size() - from);
}

}  // namespace

void validate_lds_options(const LdsOptions& o, const std::string& subsets_flag, const std::string& fraction_flag) {
  if (o.subsets < 2) throw InputError(str_cat(subsets_flag, " ", o.subsets, ": expected at least 2 subsets"));
  if (!(o.drop_fraction > 0 && o.drop_fraction < 1)) {
    throw InputError(str_cat(fraction_flag, " ", o.drop_fraction, ": expected a fraction in (0, 1)"));
  }
  if (o.bootstrap < 1) throw InputError(str_cat("bootstrap resamples ", o.bootstrap, ": expected >= 1"));
}

void estimate_lds(LdsResult& r, const LdsOptions& o, int64_t mean_from) {
  const std::vector<double> point = column_spearman(r.actual, r.predicted);
  const int64_t subsets = r.actual.size(0), columns = r.actual.size(1);
  std::vector<std::vector<double>> samples(columns);
  std::vector<double> mean_samples;
  at::Generator gen = make_generator(derive_seed(o.seed, "lds-bootstrap"));
  for (int64_t b = 0; b < o.bootstrap; ++b) {
    const at::Tensor rows = at::randint(subsets, {subsets}, gen, at::kLong);
    const std::vector<double> s = column_spearman(r.actual.index_select(0, rows), r.predicted.index_select(0, rows));
    for (int64_t c = 0; c < columns; ++c) samples[c].push_back(s[c]);
    mean_samples.push_back(mean_of(s, mean_from));
  }
  const double lo = (1 - o.level) / 2, hi = (1 + o.level) / 2;
  r.per_column.clear();
  for (int64_t c = 0; c < columns; ++c) {
    r.per_column.push_back({point[c], quantile(samples[c], lo), quantile(samples[c], hi)});
  }
  r.mean = {mean_of(point, mean_from), quantile(mean_samples, lo), quantile(mean_samples, hi)};
}

int64_t lds_dropped_count(const LdsOptions& o, int64_t n) {
  const auto dropped = static_cast<int64_t>(std::llround(o.drop_fraction * static_cast<double>(n)));
  if (dropped < 1 || dropped >= n) {
    throw InputError(str_cat("--drop-fraction ", o.drop_fraction, ": drops ", dropped, " of the ", n,
                             " training examples; expected at least 1 and fewer than all"));
  }
  return dropped;
}

LdsResult validate_lds(const LmProblem& p, const at::Tensor& scores, bool per_query, const LdsOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = p.train->size(), dropped = lds_dropped_count(o, n);
  const int64_t queries = p.query->num_queries();
  LdsResult r;
  r.columns.push_back("the query set");
  // τ per column, shaped like the weights: the mean loss's τ is the mean of the queries' τ.
  std::vector<at::Tensor> tau{per_query ? scores.mean(0) : scores};
  if (per_query) {
    for (int64_t q = 0; q < queries; ++q) {
      r.columns.push_back(p.query_documents[q].id);
      tau.push_back(scores[q]);
    }
  }
  const auto losses = [&](const TensorTree& params) {
    at::NoGradGuard no_grad;
    std::vector<double> out{p.query->loss(params).item<double>()};
    if (per_query) {
      for (int64_t q = 0; q < queries; ++q) out.push_back(p.query->loss(params, q).item<double>());
    }
    return out;
  };
  std::optional<ProgressMeter> meter;
  if (o.progress) meter.emplace("LDS", lds_retrainings(o), *o.progress, o.terminal).counting("retrainings");
  dist::set_phase("LDS: retraining with every weight");
  const std::vector<double> base = losses(train_forward(*p.step, p.initial, p.weights, nullptr).params);
  if (meter) meter->update(1);
  const auto columns = static_cast<int64_t>(r.columns.size());
  r.actual = at::zeros({o.subsets, columns}, at::kDouble);
  r.predicted = at::zeros({o.subsets, columns}, at::kDouble);
  at::Generator gen = make_generator(derive_seed(o.seed, "lds-subsets"));
  for (int64_t s = 0; s < o.subsets; ++s) {
    dist::set_phase(str_cat("LDS: retraining without subset ", s));
    const at::Tensor drop = at::randperm(n, gen, at::kLong).slice(0, 0, dropped);
    at::Tensor w = p.weights.clone();
    w.index_fill_(0, drop, 0.0);
    const std::vector<double> after = losses(train_forward(*p.step, p.initial, w, nullptr).params);
    const at::Tensor change = (w - p.weights).to(at::kDouble);
    for (int64_t c = 0; c < columns; ++c) {
      r.actual[s][c] = after[c] - base[c];
      r.predicted[s][c] = (tau[c].to(at::kDouble) * change).sum();
    }
    if (meter) meter->update(s + 2);
  }
  if (meter) meter->finish();
  estimate_lds(r, o, per_query ? 1 : 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace magic
