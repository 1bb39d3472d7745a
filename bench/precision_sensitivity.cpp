// precision_sensitivity: the smallest scale error c each precision still detects. Plants g -> c·g
// on the gradient reduction (every step, every parameter) of the lm workload on dp=4, ranks as
// threads, and runs magic-check's comparison (fp64: at the tolerance; lower: the three-run
// criterion against fp64, and the reduction rows) for |c - 1| from 0.1% to 50%, in both
// directions. Prints, per precision, whether each c was caught and at which level, by every row
// and by the rows against the reference alone (what a scale error outside the reduction meets),
// and the smallest |c - 1| caught in both directions with every larger one caught too.
//
//   precision_sensitivity [--topology dp=4] [--dtypes bf16,fp16,fp32,fp64]
#include <ATen/Parallel.h>

#include <iostream>
#include <sstream>

#include "bench/bench_flags.h"
#include "checks/lm_pipelines.h"
#include "checks/planted_precision.h"
#include "checks/run_check.h"
#include "lib/core/allocator.h"
#include "lib/core/dtype.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/runtime.h"

namespace {

using namespace magic;

// The first failing level ("" if none failed) of the comparison with gradients scaled by c: over
// every row, and over the rows against the reference alone (without the reduction rows, which see
// a scale planted in the reduction itself; a scale error upstream of it, in the loss, shows only
// against the reference).
struct Failures {
  std::string all, against_reference;
};

Failures first_failures(const checks::CheckSettings& s, const checks::ReferenceRun& reference,
                        const checks::PipelineOutputs* golden, double c) {
  Failures out;
  dist::run_ranks_in_threads(static_cast<int>(s.topology.world_size()), [&](dist::Runtime& rt) {
    const auto outputs = checks::run_distributed_lm(s, rt, str_cat(checks::kScaledGradientPrefix, c), reference);
    if (rt.rank() != 0) return;
    int all = 1 << 20, against_reference = 1 << 20;
    for (const auto& row : checks::compare_outputs(outputs, reference.outputs, s, golden)) {
      if (row.passed) continue;
      const int rank = checks::level_rank(row.level);
      if (rank < all) {
        all = rank;
        out.all = row.level;
      }
      if (!row.reduction && rank < against_reference) {
        against_reference = rank;
        out.against_reference = row.level;
      }
    }
  });
  return out;
}

std::string verdict(const std::string& level) {
  return level.empty() ? "missed" : "caught at " + level;
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();  // lib/core/allocator.h
  auto flags = magic::bench::parse_flags(argc, argv, {{"topology", "dp=4"}, {"dtypes", "bf16,fp16,fp32,fp64"}},
                                         "precision_sensitivity [--topology dp=4] [--dtypes bf16,fp16,fp32,fp64]");
  const std::string topology = flags["topology"], dtypes = flags["dtypes"];
  at::set_num_threads(1);
  const std::vector<double> deltas{0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5};
  std::stringstream list(dtypes);
  std::string name;
  while (std::getline(list, name, ',')) {
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(topology);
    s.precision = PrecisionPolicy::for_compute(parse_dtype(name, "--dtypes"));
    const checks::ReferenceRuns references = checks::run_references(s);
    const checks::ReferenceRun& reference = references.reference;
    const std::optional<checks::ReferenceRun>& golden = references.golden;
    std::cout << name << " on " << topology << ":\n";
    double smallest = -1, smallest_reference = -1;
    bool all_caught = true, reference_caught = true;
    for (auto it = deltas.rbegin(); it != deltas.rend(); ++it) {
      const Failures up = first_failures(s, reference, golden ? &golden->outputs : nullptr, 1 + *it);
      const Failures down = first_failures(s, reference, golden ? &golden->outputs : nullptr, 1 - *it);
      std::cout << "  |c-1| = " << format_fixed(*it, 3) << ": c = " << format_fixed(1 + *it, 3) << " "
                << verdict(up.all) << " (against the reference: " << verdict(up.against_reference)
                << "), c = " << format_fixed(1 - *it, 3) << " " << verdict(down.all)
                << " (against the reference: " << verdict(down.against_reference) << ")\n";
      all_caught = all_caught && !up.all.empty() && !down.all.empty();
      reference_caught = reference_caught && !up.against_reference.empty() && !down.against_reference.empty();
      if (all_caught) smallest = *it;
      if (reference_caught) smallest_reference = *it;
      if (!all_caught && !reference_caught) break;
    }
    auto shown = [](double d) { return d < 0 ? std::string("none") : format_fixed(d, 3); };
    std::cout << "  smallest |c-1| detected (with every larger one): " << shown(smallest)
              << "; by the rows against the reference alone: " << shown(smallest_reference) << "\n";
  }
  return 0;
}
