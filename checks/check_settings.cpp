#include "checks/check_settings.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic::checks {

const std::vector<Level>& all_levels() {
  static const std::vector<Level> levels{Level::kGrad, Level::kQueryGrad, Level::kHvp, Level::kFinalParams,
                                         Level::kScores};
  return levels;
}

std::string level_name(Level level) {
  switch (level) {
    case Level::kGrad: return "grad";
    case Level::kQueryGrad: return "query_grad";
    case Level::kHvp: return "hvp";
    case Level::kFinalParams: return "final_params";
    case Level::kScores: return "scores";
  }
  return "?";
}

int level_rank(const std::string& name) {
  const auto& levels = all_levels();
  for (size_t i = 0; i < levels.size(); ++i) {
    if (level_name(levels[i]) == name) return static_cast<int>(i);
  }
  return static_cast<int>(levels.size());
}

std::vector<Level> parse_levels(const std::string& list) {
  std::vector<Level> out;
  std::vector<std::string> names;
  for (Level l : all_levels()) names.push_back(level_name(l));
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto it = std::find(names.begin(), names.end(), item);
    if (it == names.end()) {
      throw InputError(str_cat("--checks: unknown level '", item, "'; expected a comma-separated list of ",
                               join(names, ", ")));
    }
    out.push_back(all_levels()[it - names.begin()]);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool CheckSettings::wants(Level level) const {
  return std::find(levels.begin(), levels.end(), level) != levels.end();
}

void CheckSettings::validate() const {
  if (workload != "lm") throw InputError(str_cat("--workload: unknown workload '", workload, "'; expected lm"));
  if (steps < 1) throw InputError(str_cat("--steps: expected an integer >= 1, got ", steps));
  if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
    throw InputError(str_cat("--optimizer: unknown optimizer '", optimizer, "'; expected one of sgd, adam, adamw"));
  }
  if (batch_size < 0) throw InputError(str_cat("--batch: expected an integer >= 1, got ", batch_size));
  if (!dist::backend_available(backend)) {
    throw InputError("--backend nccl: this build has no NCCL (configure against a CUDA LibTorch)");
  }
}

}  // namespace magic::checks
