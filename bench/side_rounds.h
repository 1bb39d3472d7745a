// One side of a side-by-side timing (bench/peer_compare, bench/pythia_shaped): over its rounds,
// the fastest round's seconds, the largest peak RSS, the BLAS it mapped and the threads it ran.
#pragma once

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/child_run.h"
#include "lib/core/strings.h"

namespace magic::bench {

// The number the first group of `pattern` matches in `text`; throws naming `what` when none does.
inline double field(const std::string& text, const std::string& pattern, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) {
    throw std::runtime_error(str_cat("no ", what, " in the output:\n", text));
  }
  return std::stod(m[1]);
}

struct Side {
  double train_s = 0, replay_s = 0, peak_rss_mib = 0;
  std::set<std::string> blas;
  std::string threads;
  int64_t rounds = 0;

  double total() const { return train_s + replay_s; }
  void add(double train, double replay, const ChildRun& run, const std::string& reported_threads) {
    if (rounds++ == 0 || train + replay < total()) {
      train_s = train;
      replay_s = replay;
    }
    peak_rss_mib = std::max(peak_rss_mib, run.peak_rss_mib);
    for (const auto& path : run.libraries) {
      const std::string name = std::filesystem::path(path).filename().string();
      if (std::regex_search(name, std::regex("blas|mkl|blis"))) blas.insert(path);
    }
    threads = reported_threads;
  }
};

// Whether a speed-up between two sides measures the code: the same BLAS and the same threads.
inline bool alike(const Side& a, const Side& b) {
  return a.blas == b.blas && a.threads == b.threads && !a.blas.empty();
}

inline std::string blas_text(const std::set<std::string>& blas) {
  return blas.empty() ? "none seen" : join(std::vector<std::string>(blas.begin(), blas.end()), " + ");
}

}  // namespace magic::bench
