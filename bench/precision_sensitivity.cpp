// precision_sensitivity: the smallest scale error c each precision still detects. Plants g -> c·g
// on the gradient reduction (every step, every parameter) of the lm workload on dp=4, ranks as
// threads, and runs magic-check's comparison (fp64: at the tolerance; lower: the three-run
// criterion against fp64) for |c - 1| from 0.1% to 50%, in both directions. Prints, per
// precision, whether each c was caught and at which level, and the smallest |c - 1| caught in
// both directions with every larger one caught too.
//
//   precision_sensitivity [--topology dp=4] [--dtypes bf16,fp16,fp32,fp64]
#include <ATen/Parallel.h>

#include <cstring>
#include <iostream>
#include <sstream>

#include "checks/lm_pipelines.h"
#include "checks/planted_precision.h"
#include "lib/core/dtype.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/runtime.h"

namespace {

using namespace magic;

// The first failing level of the comparison with gradients scaled by c ("" if none failed).
std::string first_failure(const checks::CheckSettings& s, const checks::ReferenceRun& reference,
                          const checks::PipelineOutputs* golden, double c) {
  std::string level;
  dist::run_ranks_in_threads(static_cast<int>(s.topology.world_size()), [&](dist::Runtime& rt) {
    const auto outputs = checks::run_distributed_lm(s, rt, str_cat(checks::kScaledGradientPrefix, c), reference.states);
    if (rt.rank() != 0) return;
    int best = 1 << 20;
    for (const auto& row : checks::compare_outputs(outputs, reference.outputs, s, golden)) {
      if (!row.passed && checks::level_rank(row.level) < best) {
        best = checks::level_rank(row.level);
        level = row.level;
      }
    }
  });
  return level;
}

}  // namespace

int main(int argc, char** argv) {
  std::string topology = "dp=4", dtypes = "bf16,fp16,fp32,fp64";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--topology") == 0) topology = argv[i + 1];
    if (std::strcmp(argv[i], "--dtypes") == 0) dtypes = argv[i + 1];
  }
  at::set_num_threads(1);
  const std::vector<double> deltas{0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5};
  std::stringstream list(dtypes);
  std::string name;
  while (std::getline(list, name, ',')) {
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(topology);
    s.precision = PrecisionPolicy::for_compute(parse_dtype(name, "--dtypes"));
    const checks::ReferenceRun reference = checks::run_reference_lm(s);
    std::optional<checks::ReferenceRun> golden;
    if (s.precision.low_precision()) {
      checks::CheckSettings fp64 = s;
      fp64.precision = PrecisionPolicy{};
      golden = checks::run_reference_lm(fp64);
    }
    std::cout << name << " on " << topology << ":\n";
    double smallest = -1;
    for (auto it = deltas.rbegin(); it != deltas.rend(); ++it) {
      const std::string up = first_failure(s, reference, golden ? &golden->outputs : nullptr, 1 + *it);
      const std::string down = first_failure(s, reference, golden ? &golden->outputs : nullptr, 1 - *it);
      std::cout << "  |c-1| = " << format_fixed(*it, 3) << ": c = " << format_fixed(1 + *it, 3) << " "
                << (up.empty() ? "missed" : "caught at " + up) << ", c = " << format_fixed(1 - *it, 3) << " "
                << (down.empty() ? "missed" : "caught at " + down) << "\n";
      if (up.empty() || down.empty()) break;
      smallest = *it;
    }
    std::cout << "  smallest |c-1| detected (with every larger one): "
              << (smallest < 0 ? "none" : format_fixed(smallest, 3)) << "\n";
  }
  return 0;
}
